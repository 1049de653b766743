/*
 * status_csv.c - `gpuman status --format csv` and nvidia-smi's
 * --query-gpu: status's columns (its own, then each GPU field with a CSV
 * name), a GPU's value in each, and the rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "gpuman-internal.h"
#include "select.h"
#include "status.h"

/*
 * status's CSV columns: its own, which are no reading of the GPU, and each
 * row of the GPU field table (gpu_fields.h) that has a CSV name, under that
 * name and, for --query-gpu, under nvidia-smi's with its unit.
 */
enum own_column {
	OWN_INDEX,
	OWN_UUID,
	OWN_NAME,
	OWN_PROCESSES,
	OWN_LEASED_BY,
	OWN_MIG_DEVICES,
	OWN_PCI_BUS_ID,
	OWN_COUNT
};
static const struct {
	struct csv_column csv;
	const char *smi, *smi_alias; /* nvidia-smi's names; NULL none */
} own_columns[OWN_COUNT] = {
    [OWN_INDEX] = {{"index", "NVML index"}, "index", NULL},
    [OWN_UUID] = {{"uuid", ""}, "uuid", "gpu_uuid"},
    [OWN_NAME] = {{"name", ""}, "name", "gpu_name"},
    [OWN_PROCESSES] = {{"processes", "count"}, NULL, NULL},
    [OWN_LEASED_BY] = {{"leased_by", "users"}, NULL, NULL},
    [OWN_MIG_DEVICES] = {{"mig_devices", "PROFILE:MIG-UUID, space separated"}, NULL, NULL},
    [OWN_PCI_BUS_ID] = {{"pci_bus_id", "domain:bus:device.function"}, "pci.bus_id", "gpu_bus_id"},
};
/* A column's source: enum own_column, or a row of the field table. */
#define FIELD(id) (OWN_COUNT + (int)(id))
/* The order of the columns before the table gave them, which scripts may
 * read by position.  Every other row with a CSV name follows, in the
 * table's order: a new reading comes last. */
static const int csv_first[] = {
    OWN_INDEX,
    OWN_UUID,
    OWN_NAME,
    FIELD(GM_GPU_TEMPERATURE_C),
    FIELD(GM_GPU_UTIL_GPU_PCT),
    FIELD(GM_GPU_MEM_USED_MIB),
    FIELD(GM_GPU_MEM_TOTAL_MIB),
    FIELD(GM_GPU_MEM_FREE_MIB),
    FIELD(GM_GPU_POWER_MW),
    FIELD(GM_GPU_POWER_LIMIT_MW),
    OWN_PROCESSES,
    OWN_LEASED_BY,
    OWN_MIG_DEVICES,
    FIELD(GM_GPU_CLOCK_SM_MHZ),
    FIELD(GM_GPU_CLOCK_MEM_MHZ),
    FIELD(GM_GPU_CLOCK_GRAPHICS_MHZ),
    FIELD(GM_GPU_MAX_CLOCK_SM_MHZ),
    FIELD(GM_GPU_MAX_CLOCK_MEM_MHZ),
    FIELD(GM_GPU_MAX_CLOCK_GRAPHICS_MHZ),
    OWN_PCI_BUS_ID,
};
_Static_assert(OWN_COUNT == STATUS_OWN_COLUMNS, "status.h counts status's own columns");

struct status_column {
	int src;                                /* enum own_column, or FIELD(id) */
	const char *smi, *smi_alias, *smi_unit; /* nvidia-smi's; NULL none */
};
/* Built once by status_columns_init(); status_csv[i] is column i's name. */
static struct csv_column status_csv[STATUS_COLUMNS_MAX];
static struct status_column status_cols[STATUS_COLUMNS_MAX];
static size_t status_ncols;

static const char *named_or_null(const char *name)
{
	return gpu_field_named(name) ? name : NULL;
}

static void add_column(int src)
{
	struct status_column *s = &status_cols[status_ncols];

	if (src < OWN_COUNT) {
		status_csv[status_ncols] = own_columns[src].csv;
		*s = (struct status_column){src, own_columns[src].smi, own_columns[src].smi_alias,
		                            NULL};
	} else {
		const struct gpu_field *f = &gpu_fields[src - OWN_COUNT];

		status_csv[status_ncols] = (struct csv_column){f->csv, f->shown_unit};
		*s = (struct status_column){src, named_or_null(f->smi), named_or_null(f->smi_alias),
		                            named_or_null(f->smi_unit)};
	}
	status_ncols++;
}

void status_columns_init(void)
{
	int listed[STATUS_COLUMNS_MAX] = {0};

	if (status_ncols)
		return;
	for (size_t i = 0; i < sizeof csv_first / sizeof csv_first[0]; i++) {
		add_column(csv_first[i]);
		listed[csv_first[i]] = 1;
	}
	for (size_t i = 0; i < gpu_field_count; i++)
		if (gpu_field_named(gpu_fields[i].csv) && !listed[FIELD(i)])
			add_column(FIELD(i));
}

/* One GPU's value of CSV column col, in buf or a string of the snapshot;
 * NULL where the GPU does not report it. */
static const char *column_value(const struct cli_select *sel, const struct cli_look *look,
                                const struct gm_gpu *g, size_t col, char *buf, size_t len)
{
	const struct gm_snapshot *snap = look->snap;
	size_t procs = 0, o = 0;
	int src = status_cols[col].src;

	switch (src) {
	case OWN_INDEX:
		snprintf(buf, len, "%u", g->index);
		return buf;
	case OWN_UUID:
		return g->uuid[0] ? g->uuid : NULL;
	case OWN_NAME:
		return g->name[0] ? g->name : NULL;
	case OWN_PROCESSES:
		for (size_t k = 0; k < snap->proc_count; k++)
			procs +=
			    snap->procs[k].gpu == g->index && cli_select_proc(sel, &snap->procs[k]);
		snprintf(buf, len, "%zu", procs);
		return buf;
	case OWN_LEASED_BY:
		buf[0] = '\0';
		for (size_t l = 0; l < look->view->lease_count; l++)
			for (size_t k = 0; k < look->view->leases[l].gpu_count; k++)
				if (look->view->leases[l].indices[k] == g->index && o < len)
					o +=
					    (size_t)snprintf(buf + o, len - o, "%s%s", o ? " " : "",
					                     look->view->leases[l].user);
		return buf;
	case OWN_MIG_DEVICES:
		buf[0] = '\0';
		for (size_t k = 0; k < snap->mig_count; k++)
			if (snap->migs[k].gpu == g->index && o < len)
				o += (size_t)snprintf(buf + o, len - o, "%s%s:%s", o ? " " : "",
				                      snap->migs[k].profile, snap->migs[k].uuid);
		return buf;
	case OWN_PCI_BUS_ID:
		return (g->valid & GM_HAS_PCI) && g->pci_bus_id[0] ? g->pci_bus_id : NULL;
	default:
		return gpu_field_text(g, &gpu_fields[src - OWN_COUNT], buf, len);
	}
}

/* --query-gpu=FIELDS into status's column names (out, len bytes); EXIT_OK,
 * or a usage error naming the field gpuman does not have.  A name that no
 * column has is a field gpuman does not read. */
int status_smi_columns(struct cli *cli, const char *query, char *out, size_t len)
{
	char *list = strdup(query), *tok, *save = NULL, known[1024];
	size_t o = 0, k = 0;
	int rc = EXIT_OK;

	if (!list)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	out[0] = '\0';
	for (tok = strtok_r(list, ",", &save); tok && rc == EXIT_OK;
	     tok = strtok_r(NULL, ",", &save)) {
		const struct status_column *s = NULL;
		struct spell near;
		const char *best;
		size_t col;

		tok += strspn(tok, " ");
		for (col = 0; col < status_ncols && !s; col++)
			if (status_cols[col].smi &&
			    (!strcasecmp(tok, status_cols[col].smi) ||
			     (status_cols[col].smi_alias &&
			      !strcasecmp(tok, status_cols[col].smi_alias))))
				s = &status_cols[col];
		if (s) {
			o += (size_t)snprintf(out + o, o < len ? len - o : 0, "%s%s", o ? "," : "",
			                      status_csv[s - status_cols].name);
			continue;
		}
		near = (struct spell)SPELL_INIT(tok);
		known[0] = '\0';
		k = 0;
		for (col = 0; col < status_ncols; col++) {
			if (!status_cols[col].smi)
				continue;
			spell_offer(&near, status_cols[col].smi);
			if (k < sizeof known)
				k += (size_t)snprintf(known + k, sizeof known - k, "%s%s",
				                      k ? ", " : "", status_cols[col].smi);
		}
		best = spell_best(&near);
		rc = cli_usage(
		    cli, "--query-gpu: '%s' is not a field gpuman reads%s%s%s (it has: %s)", tok,
		    best ? " (did you mean '" : "", best ? best : "", best ? "'?)" : "", known);
	}
	free(list);
	if (rc == EXIT_OK && (!o || o >= len))
		rc = cli_usage(cli, "--query-gpu '%s': name the fields to show", query);
	return rc;
}

void status_print_csv(const struct cli_select *sel, const struct cli_look *look, const size_t *idx,
                      size_t n)
{
	const struct gm_snapshot *snap = look->snap;
	char buf[512], safe[CLI_SAFE_SIZE];

	if (sel->smi && !sel->noheader) {
		for (size_t c = 0; c < n; c++) {
			const struct status_column *s = &status_cols[idx[c]];

			printf("%s%s", c ? ", " : "", s->smi ? s->smi : status_csv[idx[c]].name);
			if (s->smi_unit && !sel->nounits)
				printf(" [%s]", s->smi_unit);
		}
		putchar('\n');
	} else {
		csv_header(sel, status_csv, idx, n);
	}
	for (size_t i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *g = &snap->gpus[i];

		if (!cli_select_gpu_shown(sel, look, g))
			continue;
		for (size_t c = 0; c < n; c++) {
			const char *v = column_value(sel, look, g, idx[c], buf, sizeof buf);
			const struct status_column *s = &status_cols[idx[c]];

			if (!sel->smi) {
				csv_field(c == 0, v);
				continue;
			}
			/* nvidia-smi's form: ", " between fields, units, no quoting */
			printf("%s%s", c ? ", " : "", v ? cli_safe(safe, v) : "[N/A]");
			if (v && s->smi_unit && !sel->nounits)
				printf(" %s", s->smi_unit);
		}
		putchar('\n');
	}
}

const struct csv_column *status_columns(size_t *n)
{
	*n = status_ncols;
	return status_csv;
}
