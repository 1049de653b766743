/*
 * jobstore_db.h - the job store's own: what jobstore.c shares with the
 * files that extend it (jobstore_ext.c).  Not for the commands.
 */
#ifndef GM_JOBSTORE_DB_H
#define GM_JOBSTORE_DB_H

#include <sqlite3.h>
#include "jobstore.h"

/* Statements of jobstore_ext.c, prepared once per connection. */
#define JOBSTORE_EXTRA_STMTS 4

/* The statement in slot (prepared from sql on first use), reset and with
 * the machine filter bound; NULL if it cannot be prepared. */
sqlite3_stmt *jobstore_cached(struct jobstore *st, unsigned slot, const char *sql);
enum gm_err jobstore_db_fail(struct jobstore *st, char *errbuf, size_t errlen, const char *what);
/* The machine filter of the connection (owned by it). */
char **jobstore_machine_filter(struct jobstore *st);

/* Schema 3 to 4 (jobstore_ext.c). */
extern const char jobstore_schema4[];
extern const char jobstore_schema5[];

#endif
