/*
 * gpu_fields.h - the GPU's numeric readings, one row each: where the
 * snapshot keeps it, its type and unit, where NVML gives it, and its name
 * in every output that carries it.  Every output reads this table: the
 * broker's wire (snapshot_wire.c), the JSON (snapshot.c), gm_gpu_value(),
 * status's CSV and its --query-gpu spelling (cli/cmd_status.c), gpuman
 * info's lines and serve's page for a reading of its own (cli/cmd_info.c,
 * serve/page.c), and serve's metrics (serve/metrics.c).
 *
 * A new reading is a row here (appended: the wire sends readings in row
 * order), its place in struct gm_gpu with a GM_HAS_* bit, a GM_GPU_* value
 * for programs (gpuman.h), and its NVML call: none to write when NVML gives
 * it as fn(device, unsigned *) (read GF_READ_DEV_UINT), else in
 * nvml_gpu.c.  The simulator answers it from its scenario key.
 *
 * Each name is given or GF_NONE, said on purpose: a row that leaves one
 * out (NULL) fails tests/unit/test_gpu_fields.c.  Views with a layout of
 * their own (status's table, info's and the page's lines for memory,
 * clocks, power) show the first rows in it; a reading with a label and no
 * such place gets a line of its own in info and on the page.
 */
#ifndef GM_GPU_FIELDS_H
#define GM_GPU_FIELDS_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"
#include "snapshot_types.h"

/* "Not shown under this name", on purpose. */
#define GF_NONE ""

enum gpu_field_type { GF_UNSIGNED, GF_INT, GF_U64 };

/* How the snapshot reads it from NVML. */
enum gpu_field_read {
	GF_READ_OWN,     /* by nvml_gpu.c's own code */
	GF_READ_DEV_UINT /* nvml names fn(nvmlDevice_t, unsigned int *): the table's own */
};

struct gpu_field {
	enum gm_gpu_value id; /* the row's public name; rows are in id order */
	size_t offset;        /* in struct gm_gpu */
	enum gpu_field_type type;
	const char *unit; /* as kept: "MiB", "%", "mW", "C", "MHz"; "" none */
	unsigned need;    /* enum gm_field bits that say it was read */
	const char *nvml; /* the NVML function that gives it */
	enum gpu_field_read read;
	/* Every output shows value / scale: 1 as it is; more (mW -> W) with
	 * decimals, in shown_unit. */
	unsigned scale;
	const char *shown_unit; /* "W" for mW; "" none */
	const char *json;       /* key in the snapshot's JSON */
	const char *csv;        /* status --format csv column */
	const char *smi;        /* nvidia-smi --query-gpu name (status's CSV column) */
	const char *smi_alias;  /* nvidia-smi's other name for it */
	const char *smi_unit;   /* what nvidia-smi's CSV writes after it; "" none */
	const char *label;      /* info's line and the page's, where they have none of their own */
	const char *metric;     /* Prometheus name (dcgm-exporter's where it has one) */
	const char *help;       /* the metric's HELP text */
};

extern const struct gpu_field gpu_fields[];
extern const size_t gpu_field_count;
/* Room for a value per row (gpu_fields.c asserts the table fits). */
#define GPU_FIELD_MAX 64

/* Whether a name is given (not GF_NONE, not left out). */
static inline int gpu_field_named(const char *name)
{
	return name && name[0];
}

/* The reading of row f on gpu: 1 with it in *out, 0 when the GPU did not
 * give it. */
int gpu_field_get(const struct gm_gpu *gpu, const struct gpu_field *f, int64_t *out);
/* Store v into row f's place on gpu (the wire's decoder, the NVML reader). */
void gpu_field_set(struct gm_gpu *gpu, const struct gpu_field *f, int64_t v);
/* The row's reading as people read it ("12", "300.0": value / scale,
 * without its unit) into buf; buf, or NULL when the GPU did not give it. */
const char *gpu_field_text(const struct gm_gpu *gpu, const struct gpu_field *f, char *buf,
                           size_t len);

#endif
