/*
 * gpu_fields.h - the GPU's numeric readings, one row each: where the
 * snapshot keeps it, its type and unit, where NVML gives it, and its name
 * in every output that carries it (JSON, nvidia-smi's --query-gpu CSV
 * name, the Prometheus metric).  The broker's wire (snapshot_wire.c), the
 * JSON form (snapshot.c), gm_gpu_value() and gpuman-serve's metrics read
 * this table: a new reading is a row here plus its NVML call (nvml_gpu.c)
 * and, for programs, a GM_GPU_* value in gpuman.h.
 *
 * Not yet on it: status's human table and CSV columns (cli/cmd_status.c,
 * its own column list), info, the page.
 */
#ifndef GM_GPU_FIELDS_H
#define GM_GPU_FIELDS_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"
#include "snapshot_types.h"

enum gpu_field_type { GF_UNSIGNED, GF_INT, GF_U64 };

struct gpu_field {
	enum gm_gpu_value id; /* the row's public name; rows are in id order */
	size_t offset;        /* in struct gm_gpu */
	enum gpu_field_type type;
	const char *unit;      /* "MiB", "%", "mW", "C", "MHz"; "" none */
	unsigned need;         /* enum gm_field bits that say it was read */
	const char *nvml;      /* the NVML function that gives it */
	const char *json;      /* key in the snapshot's JSON; NULL: shown otherwise */
	unsigned json_scale;   /* JSON shows value / scale (mW -> W), 1: as it is */
	const char *smi;       /* nvidia-smi --query-gpu name; NULL none */
	const char *metric;    /* Prometheus name (dcgm-exporter's where it has one); NULL none */
	const char *help;      /* the metric's HELP text */
	unsigned metric_scale; /* the metric shows value / scale, 3 decimals when > 1 */
};

extern const struct gpu_field gpu_fields[];
extern const size_t gpu_field_count;

/* The reading of row f on gpu: 1 with it in *out, 0 when the GPU did not
 * give it. */
int gpu_field_get(const struct gm_gpu *gpu, const struct gpu_field *f, int64_t *out);
/* Store v into row f's place on gpu (the wire's decoder). */
void gpu_field_set(struct gm_gpu *gpu, const struct gpu_field *f, int64_t v);

#endif
