/*
 * status.h - what cmd_status.c takes from status_csv.c (status's CSV
 * columns and nvidia-smi's names for them) and status_table.c (the table).
 */
#ifndef GM_CLI_STATUS_H
#define GM_CLI_STATUS_H

#include <stddef.h>
#include "gpuman-internal.h"
#include "select.h"

/* status's own columns (index, uuid, ...), before the GPU field table's. */
#define STATUS_OWN_COLUMNS 7
#define STATUS_COLUMNS_MAX (STATUS_OWN_COLUMNS + GPU_FIELD_MAX)

/* The columns, built once; status_columns() gives them and their count. */
void status_columns_init(void);
const struct csv_column *status_columns(size_t *n);
/* --query-gpu=FIELDS (nvidia-smi's names) into status's column names in
 * out (len bytes): EXIT_OK, or a usage error naming the unknown field. */
int status_smi_columns(struct cli *cli, const char *query, char *out, size_t len);
/* The selected GPUs' rows, columns idx (n of them); nvidia-smi's form with
 * sel->smi. */
void status_print_csv(const struct cli_select *sel, const struct cli_look *look, const size_t *idx,
                      size_t n);

/* The table of what look shows, under sel's -i and -u, with the waste
 * found (its first few findings). */
void status_print_table(const struct cli *cli, const struct cli_select *sel,
                        const struct cli_look *look, const struct waste_opts *wopts,
                        const struct waste_report *waste);
/* A finding status shows under -i and -u: one of those users', on one of
 * those GPUs (the table and the JSON alike). */
int status_waste_shown(const struct cli_select *sel, const struct waste_item *it);

#endif
