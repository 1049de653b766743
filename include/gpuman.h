/*
 * gpuman.h - the one public API of libgpuman.
 *
 * libgpuman sees every NVIDIA GPU of the machine through NVML (loaded at run
 * time, or the gpuman NVML simulator), chooses GPUs by a policy, and leases
 * them race-free across processes and users.  The library never prints, never
 * exits and never aborts on bad input: every call that can fail returns an
 * enum gm_err and, where the caller passes one, writes a one-line detail
 * (NVML's or errno's text, the culprit's name) into a caller-supplied buffer.
 *
 * Calling sequence:
 *
 *   struct gm_context *ctx;
 *   char err[GM_ERRBUF_SIZE];
 *   if (gm_open(&ctx, err, sizeof err) != GM_OK) { report err; }
 *   struct gm_snapshot *snap;
 *   gm_snapshot_take(ctx, &snap, err, sizeof err);
 *   ... gm_snapshot_gpu(snap, i) ...
 *   gm_snapshot_free(snap);
 *
 *   struct gm_request *req = gm_request_new();
 *   gm_request_set(req, "mem", "8G", err, sizeof err);
 *   gm_request_set(req, "wait", "15m", err, sizeof err);
 *   struct gm_lease *lease;
 *   gm_acquire(ctx, req, &lease, err, sizeof err);
 *   setenv("CUDA_VISIBLE_DEVICES", gm_lease_cuda_visible(lease), 1);
 *   ... run the kernels ...
 *   gm_lease_release(lease);
 *   gm_request_free(req);
 *   gm_close(ctx);
 *
 * A context is not thread-safe; use one per thread or lock around it.
 */
#ifndef GPUMAN_H
#define GPUMAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GM_BUILDING_LIB)
#define GM_API __attribute__((visibility("default")))
#else
#define GM_API
#endif

#define GM_VERSION "0.1.0"
/* Room for a message and one line of explanation per GPU of a large node. */
#define GM_ERRBUF_SIZE 4096

/* Append-only: scripts and the Python binding rely on the numbers. */
enum gm_err {
	GM_OK = 0,
	GM_ERR_NOMEM = 1,       /* out of memory */
	GM_ERR_INVALID = 2,     /* bad argument (the detail names it) */
	GM_ERR_NVML_LOAD = 3,   /* the NVML library could not be loaded */
	GM_ERR_NVML = 4,        /* NVML answered an error */
	GM_ERR_SCENARIO = 5,    /* the simulator's scenario is malformed */
	GM_ERR_UNAVAILABLE = 6, /* the request cannot be met now (exit 75) */
	GM_ERR_TIMEOUT = 7,     /* waited, and it still cannot be met */
	GM_ERR_STATE = 8,       /* the state directory is unusable or unsafe */
	GM_ERR_IO = 9,          /* a file or system call failed */
	GM_ERR_NOT_FOUND = 10,  /* no such GPU, lease or job */
	GM_ERR_INTERRUPTED = 11, /* a signal ended a wait */
	GM_ERR_NEVER = 12        /* the request can never be met on this machine */
};

GM_API const char *gm_strerror(enum gm_err err);
GM_API const char *gm_version(void);

/* ---- context ---------------------------------------------------------- */

struct gm_context;

/*
 * Open a context.  NVML comes from $GPUMAN_NVML if set; else, when
 * $GPUMAN_SIM names a scenario, from the simulator library installed with
 * gpuman; else from the driver's libnvidia-ml.so.1.  NVML is initialised once
 * per context.  On failure *out is NULL.
 */
GM_API enum gm_err gm_open(struct gm_context **out, char *errbuf, size_t errlen);
GM_API void gm_close(struct gm_context *ctx);
/* Path or soname of the NVML library the context loaded (owned by ctx). */
GM_API const char *gm_context_nvml_path(const struct gm_context *ctx);

/* ---- snapshot --------------------------------------------------------- */

/* Bits of gm_gpu.valid: a field whose bit is clear was "not supported" or
 * unreadable, which is a state of its own, never a zero. */
enum gm_field {
	GM_HAS_MEMORY = 1u << 0,       /* mem_total/free/used_mib */
	GM_HAS_UTIL = 1u << 1,         /* util_gpu_pct, util_mem_pct */
	GM_HAS_POWER = 1u << 2,        /* power_mw */
	GM_HAS_POWER_LIMIT = 1u << 3,  /* power_limit_mw */
	GM_HAS_TEMPERATURE = 1u << 4,  /* temperature_c */
	GM_HAS_CC = 1u << 5,           /* cc_major, cc_minor */
	GM_HAS_COMPUTE_MODE = 1u << 6, /* compute_mode */
	GM_HAS_MIG = 1u << 7,          /* mig_mode */
	GM_HAS_PROCESSES = 1u << 8,    /* the process list was readable */
	GM_HAS_PCI = 1u << 9,          /* pci_bus_id */
	GM_HAS_CUDA_RANK = 1u << 10    /* cuda_rank */
};

enum gm_gpu_state {
	GM_GPU_OK = 0,
	GM_GPU_LOST = 1,          /* fell off the bus (NVML_ERROR_GPU_IS_LOST) */
	GM_GPU_NO_PERMISSION = 2, /* NVML refused us this GPU */
	GM_GPU_ERROR = 3          /* any other error; see note */
};

enum gm_compute_mode {
	GM_COMPUTE_DEFAULT = 0,
	GM_COMPUTE_EXCLUSIVE_THREAD = 1,
	GM_COMPUTE_PROHIBITED = 2,
	GM_COMPUTE_EXCLUSIVE_PROCESS = 3
};

struct gm_gpu {
	unsigned index;        /* NVML index (PCI bus order) */
	enum gm_gpu_state state;
	char note[160];        /* why the state is not OK, for people */
	char uuid[96];         /* "GPU-..." (empty if unreadable) */
	char name[96];
	char pci_bus_id[32];   /* "00000000:02:00.0" */
	unsigned valid;        /* enum gm_field bits */
	uint64_t mem_total_mib, mem_free_mib, mem_used_mib;
	unsigned util_gpu_pct, util_mem_pct;
	unsigned power_mw, power_limit_mw;
	unsigned temperature_c;
	int cc_major, cc_minor;
	int compute_mode;      /* enum gm_compute_mode */
	int mig_mode;          /* 0 disabled, 1 enabled */
	/* Compute throughput estimate (cores x max SM clock) that CUDA's default
	 * FASTEST_FIRST device order follows; higher comes first. */
	uint64_t cuda_rank;
};

enum gm_proc_kind { GM_PROC_COMPUTE = 1, GM_PROC_GRAPHICS = 2 };

struct gm_proc {
	unsigned pid;
	unsigned gpu;           /* NVML index of its GPU */
	int has_mem;            /* 0 when NVML does not report its memory */
	uint64_t used_mib;
	unsigned kind;          /* enum gm_proc_kind bits */
	int has_user;           /* /proc showed the owner */
	unsigned uid;
	char user[33];
	char command[256];      /* command line, empty if /proc hides it */
};

struct gm_snapshot {
	char driver_version[80];   /* empty if unknown */
	int cuda_driver_version;   /* 13000 means 13.0; 0 if unknown */
	size_t gpu_count;
	struct gm_gpu *gpus;       /* sorted by NVML index */
	size_t proc_count;
	struct gm_proc *procs;     /* sorted by GPU, then pid */
	size_t note_count;
	char **notes;              /* GPUs skipped and other remarks, for people */
	int64_t taken_ms;          /* wall-clock time of the snapshot */
};

/* Read every GPU and its processes now.  Free with gm_snapshot_free().
 * A GPU that answers an error is kept with its state and note; only a whole
 * failure of NVML fails the call. */
GM_API enum gm_err gm_snapshot_take(struct gm_context *ctx, struct gm_snapshot **out,
				    char *errbuf, size_t errlen);
GM_API void gm_snapshot_free(struct gm_snapshot *snap);
/* The snapshot as JSON (schema in README "JSON output"); caller frees. */
GM_API char *gm_snapshot_json(const struct gm_snapshot *snap);
/* Find a GPU by NVML index ("3") or UUID prefix ("GPU-8f3", "8f3"). NULL if
 * none or ambiguous. */
GM_API const struct gm_gpu *gm_snapshot_find(const struct gm_snapshot *snap, const char *spec);

/* ---- requests --------------------------------------------------------- */

struct gm_request;

/* Returns NULL only when out of memory. Defaults: one GPU, policy "memory",
 * exclusive, no filters, no wait. */
GM_API struct gm_request *gm_request_new(void);
GM_API void gm_request_free(struct gm_request *req);
/*
 * Set one option by its command-line name, parsed exactly as the command
 * line parses it:
 *   "n" COUNT, "by" memory|memory-rate|power|util|index, "min-free" SIZE,
 *   "max-util" PERCENT, "only" LIST, "exclude" LIST, "exclusive" (value
 *   ignored), "mem" SIZE, "idle" (value ignored), "wait" DURATION ("" or
 *   NULL: forever).
 * SIZE: 8192 (MiB), 8G, 8GiB, 512M, 1T, 50%.  DURATION: 90, 90s, 15m, 2h,
 * 1h30m.  LIST: NVML indices or UUID prefixes, comma separated.
 * GM_ERR_INVALID with a message naming the option on bad input.
 */
GM_API enum gm_err gm_request_set(struct gm_request *req, const char *key, const char *value,
				  char *errbuf, size_t errlen);

/* ---- choosing without reserving --------------------------------------- */

/*
 * Choose GPUs for req from a snapshot and the live leases, as gm_acquire
 * would, without leasing them.  Only GPUs in an inherited
 * CUDA_VISIBLE_DEVICES are candidates.  On GM_OK, *indices (caller frees)
 * holds *count NVML indices in policy order.  GM_ERR_UNAVAILABLE: not now;
 * GM_ERR_NEVER: not on this machine, whatever frees up.  If explain is not
 * NULL, *explain (caller frees) gets one line per GPU not chosen saying
 * which condition excluded it ("GPU 3 (NVIDIA TITAN RTX): only 812 MiB free,
 * --min-free asks 8 GiB").
 */
GM_API enum gm_err gm_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
			   const struct gm_request *req, unsigned **indices, size_t *count,
			   char **explain);

/* ---- leases ----------------------------------------------------------- */

struct gm_lease;

/*
 * Choose GPUs for req and lease them, race-free across every process and
 * user of the machine (the registry in $GPUMAN_STATE_DIR).  The lease lives
 * until gm_lease_release() or until this process (and every child that
 * inherited gm_lease_fd()) has exited, whichever comes first: the kernel
 * drops it when its holder dies.  With "wait" set on req, waits first come,
 * first served.  GM_ERR_UNAVAILABLE (no wait), GM_ERR_TIMEOUT, GM_ERR_NEVER:
 * errbuf says why, per GPU where it can.
 */
GM_API enum gm_err gm_acquire(struct gm_context *ctx, const struct gm_request *req,
			      struct gm_lease **out, char *errbuf, size_t errlen);
/*
 * Make a gm_acquire() that waits on this context return GM_ERR_INTERRUPTED
 * at once (a later call waits normally again).  Safe from a signal handler
 * and from another thread: the one call on a context that is.
 */
GM_API void gm_cancel(struct gm_context *ctx);

/*
 * Release the lease (if still held) and free it; NULL is allowed.  The lease
 * is released for every process sharing it: a child forked while the lease
 * was held may release it on its parent's behalf (a runner supervising a
 * job does); a child that must not should leave it alone.
 */
GM_API void gm_lease_release(struct gm_lease *lease);

GM_API const char *gm_lease_id(const struct gm_lease *lease);
GM_API size_t gm_lease_gpu_count(const struct gm_lease *lease);
/* NVML index / UUID of the lease's i-th GPU (best first). */
GM_API unsigned gm_lease_gpu_index(const struct gm_lease *lease, size_t i);
GM_API const char *gm_lease_gpu_uuid(const struct gm_lease *lease, size_t i);
/* The value for CUDA_VISIBLE_DEVICES: full UUIDs, or under an inherited
 * allocation the inherited entries; owned by the lease. */
GM_API const char *gm_lease_cuda_visible(const struct gm_lease *lease);
/* NVML indices, comma separated, for GPUMAN_GPUS; owned by the lease. */
GM_API const char *gm_lease_indices(const struct gm_lease *lease);
/* For a memory share: the share as a fraction of the smallest leased GPU's
 * total (for framework memory caps); 0 for an exclusive lease. */
GM_API double gm_lease_mem_fraction(const struct gm_lease *lease);
/* The descriptor that keeps the lease alive; a child that keeps it open
 * across exec keeps the lease alive as long as it runs. */
GM_API int gm_lease_fd(const struct gm_lease *lease);

#ifdef __cplusplus
}
#endif
#endif /* GPUMAN_H */
