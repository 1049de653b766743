/*
 * gpuman.h - the one public API of libgpuman.
 *
 * libgpuman sees every NVIDIA GPU of the machine through NVML (loaded at run
 * time, or the gpuman NVML simulator), chooses GPUs by a policy, and leases
 * them race-free across processes and users.  The library never prints, never
 * exits and never aborts on bad input.
 *
 * Errors, one way: a call that can fail returns an enum gm_err (GM_OK is 0)
 * and, where the caller passes a buffer (errbuf, errlen; NULL or 0 allowed),
 * writes one detail there for people: NVML's or errno's text, the culprit's
 * name, and for an unmet request a line per GPU saying why.  gm_strerror()
 * names a code.  Calls that can fail only for lack of memory (gm_request_new,
 * gm_request_dup, gm_request_text, gm_snapshot_json) return NULL instead,
 * and lookups (gm_snapshot_find, gm_snapshot_gpu, ...) return NULL for "no
 * such thing".  Nothing else reports errors: no errno, no global state.
 *
 * Memory: text and arrays that a call hands over ("caller frees") are freed
 * with gm_free(), never free(): the caller may use another C library than
 * libgpuman (Python's ctypes does).  Objects have their own _free/_close.
 *
 * Calling sequence:
 *
 *   struct gm_context *ctx;
 *   char err[GM_ERRBUF_SIZE];
 *   if (gm_open(&ctx, err, sizeof err) != GM_OK) { report err; }
 *   struct gm_snapshot *snap;
 *   gm_snapshot_take(ctx, &snap, err, sizeof err);
 *   for (size_t i = 0; i < gm_snapshot_gpu_count(snap); i++)
 *       ... gm_gpu_name(gm_snapshot_gpu(snap, i)) ...
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
 * A context is not thread-safe; use one per thread or lock around it
 * (gm_cancel excepted).
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

/* The version of this header; gm_version() and gm_version_number() give
 * the loaded library's.  GM_VERSION is 0xMMmmpp: compare it, e.g.
 * #if GM_VERSION >= 0x000200 for what came with 0.2.0. */
#define GM_VERSION_MAJOR 0
#define GM_VERSION_MINOR 4
#define GM_VERSION_PATCH 0
#define GM_VERSION ((GM_VERSION_MAJOR << 16) | (GM_VERSION_MINOR << 8) | GM_VERSION_PATCH)
#define GM_VERSION_STRING "0.4.0"
/* Room for a message and one line of explanation per GPU of a large node. */
#define GM_ERRBUF_SIZE 4096

/* Append-only: scripts and the Python binding rely on the numbers. */
enum gm_err {
	GM_OK = 0,
	GM_ERR_NOMEM = 1,        /* out of memory */
	GM_ERR_INVALID = 2,      /* bad argument (the detail names it) */
	GM_ERR_NVML_LOAD = 3,    /* the NVML library could not be loaded */
	GM_ERR_NVML = 4,         /* NVML answered an error */
	GM_ERR_SCENARIO = 5,     /* the simulator's scenario is malformed */
	GM_ERR_UNAVAILABLE = 6,  /* the request cannot be met now (exit 75) */
	GM_ERR_TIMEOUT = 7,      /* waited, and it still cannot be met */
	GM_ERR_STATE = 8,        /* the state directory is unusable or unsafe */
	GM_ERR_IO = 9,           /* a file or system call failed */
	GM_ERR_NOT_FOUND = 10,   /* no such GPU, lease or job */
	GM_ERR_INTERRUPTED = 11, /* a signal ended a wait */
	GM_ERR_NEVER = 12        /* the request can never be met on this machine */
};

/* A short name of the code ("out of memory"); never NULL. */
GM_API const char *gm_strerror(enum gm_err err);
/* The loaded library's version: "0.4.0", and as GM_VERSION numbers it. */
GM_API const char *gm_version(void);
GM_API unsigned gm_version_number(void);
/* Free text or an array the library handed over; NULL is allowed. */
GM_API void gm_free(void *ptr);

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

/* Bits of gm_gpu_valid(): a value whose bit is clear was "not supported" or
 * unreadable, which is a state of its own, never a zero. */
enum gm_field {
	GM_HAS_MEMORY = 1u << 0,       /* GM_GPU_MEM_TOTAL/FREE/USED_MIB */
	GM_HAS_UTIL = 1u << 1,         /* GM_GPU_UTIL_GPU_PCT, _MEM_PCT */
	GM_HAS_POWER = 1u << 2,        /* GM_GPU_POWER_MW */
	GM_HAS_POWER_LIMIT = 1u << 3,  /* GM_GPU_POWER_LIMIT_MW */
	GM_HAS_TEMPERATURE = 1u << 4,  /* GM_GPU_TEMPERATURE_C */
	GM_HAS_CC = 1u << 5,           /* GM_GPU_CC_MAJOR, _MINOR */
	GM_HAS_COMPUTE_MODE = 1u << 6, /* GM_GPU_COMPUTE_MODE */
	GM_HAS_MIG = 1u << 7,          /* GM_GPU_MIG_MODE */
	GM_HAS_PROCESSES = 1u << 8,    /* the process list was readable */
	GM_HAS_PCI = 1u << 9,          /* gm_gpu_pci_bus_id() */
	GM_HAS_CUDA_RANK = 1u << 10,   /* GM_GPU_CUDA_RANK */
	/* Clocks (0.3.0), each on its own: a GPU may report some only. */
	GM_HAS_CLOCK_SM = 1u << 11,           /* GM_GPU_CLOCK_SM_MHZ */
	GM_HAS_CLOCK_MEM = 1u << 12,          /* GM_GPU_CLOCK_MEM_MHZ */
	GM_HAS_CLOCK_GRAPHICS = 1u << 13,     /* GM_GPU_CLOCK_GRAPHICS_MHZ */
	GM_HAS_MAX_CLOCK_SM = 1u << 14,       /* GM_GPU_MAX_CLOCK_SM_MHZ */
	GM_HAS_MAX_CLOCK_MEM = 1u << 15,      /* GM_GPU_MAX_CLOCK_MEM_MHZ */
	GM_HAS_MAX_CLOCK_GRAPHICS = 1u << 16, /* GM_GPU_MAX_CLOCK_GRAPHICS_MHZ */
	GM_HAS_PERSISTENCE = 1u << 17,        /* persistence mode was readable */
	GM_HAS_MINOR = 1u << 18,              /* GM_GPU_MINOR_NUMBER */
	GM_HAS_FAN = 1u << 19                 /* GM_GPU_FAN_SPEED_PCT */
};

/* The clock domains gpuman reads (NVML's nvmlClockType_t has these and
 * video). */
enum gm_clock { GM_CLOCK_SM = 0, GM_CLOCK_MEM = 1, GM_CLOCK_GRAPHICS = 2, GM_CLOCK_COUNT = 3 };

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

/*
 * A snapshot and its GPUs and processes are opaque: read them with the
 * accessors below, so that a new field never changes what a compiled
 * program sees.  Pointers they return live as long as the snapshot.
 */
struct gm_snapshot;
struct gm_gpu;
struct gm_proc;

enum gm_proc_kind { GM_PROC_COMPUTE = 1, GM_PROC_GRAPHICS = 2 };

/* Read every GPU, its clocks and its processes now.  Free with
 * gm_snapshot_free().  A GPU that answers an error is kept with its state and
 * note; only a whole failure of NVML fails the call.  (gm_pick and
 * gm_acquire take their own snapshots without the clocks, which cost six NVML
 * calls per GPU.) */
GM_API enum gm_err gm_snapshot_take(struct gm_context *ctx, struct gm_snapshot **out, char *errbuf,
                                    size_t errlen);
GM_API void gm_snapshot_free(struct gm_snapshot *snap);
/* The snapshot as JSON (schema in gpuman-status(1)); caller frees
 * (gm_free).  NULL when out of memory. */
GM_API char *gm_snapshot_json(const struct gm_snapshot *snap);
/* Find a GPU by NVML index ("3") or UUID prefix ("GPU-8f3", "8f3"). NULL if
 * none or ambiguous. */
GM_API const struct gm_gpu *gm_snapshot_find(const struct gm_snapshot *snap, const char *spec);

/* The driver's version ("580.95.05"; "" if unknown), CUDA's (13000 means
 * 13.0; 0 if unknown), and the wall-clock time of the snapshot. */
GM_API const char *gm_snapshot_driver_version(const struct gm_snapshot *snap);
GM_API int gm_snapshot_cuda_driver_version(const struct gm_snapshot *snap);
GM_API int64_t gm_snapshot_taken_ms(const struct gm_snapshot *snap);
/* GPUs sorted by NVML index; processes by GPU, then pid; notes for people
 * (GPUs skipped, other remarks).  i past the count gives NULL. */
GM_API size_t gm_snapshot_gpu_count(const struct gm_snapshot *snap);
GM_API const struct gm_gpu *gm_snapshot_gpu(const struct gm_snapshot *snap, size_t i);
GM_API size_t gm_snapshot_proc_count(const struct gm_snapshot *snap);
GM_API const struct gm_proc *gm_snapshot_proc(const struct gm_snapshot *snap, size_t i);
GM_API size_t gm_snapshot_note_count(const struct gm_snapshot *snap);
GM_API const char *gm_snapshot_note(const struct gm_snapshot *snap, size_t i);

GM_API unsigned gm_gpu_index(const struct gm_gpu *gpu); /* NVML's (PCI bus order) */
GM_API enum gm_gpu_state gm_gpu_state(const struct gm_gpu *gpu);
GM_API const char *gm_gpu_note(const struct gm_gpu *gpu); /* why not OK; "" */
GM_API const char *gm_gpu_uuid(const struct gm_gpu *gpu); /* "GPU-..."; "" */
GM_API const char *gm_gpu_name(const struct gm_gpu *gpu);
GM_API const char *gm_gpu_pci_bus_id(const struct gm_gpu *gpu); /* "00000000:02:00.0" */
GM_API unsigned gm_gpu_valid(const struct gm_gpu *gpu);         /* enum gm_field bits */

/* Append-only, like enum gm_err. */
enum gm_gpu_value {
	GM_GPU_MEM_TOTAL_MIB = 0,
	GM_GPU_MEM_FREE_MIB = 1,
	GM_GPU_MEM_USED_MIB = 2,
	GM_GPU_UTIL_GPU_PCT = 3,
	GM_GPU_UTIL_MEM_PCT = 4,
	GM_GPU_POWER_MW = 5,
	GM_GPU_POWER_LIMIT_MW = 6,
	GM_GPU_TEMPERATURE_C = 7,
	GM_GPU_CC_MAJOR = 8,
	GM_GPU_CC_MINOR = 9,
	GM_GPU_COMPUTE_MODE = 10, /* enum gm_compute_mode */
	GM_GPU_MIG_MODE = 11,     /* 0 disabled, 1 enabled */
	/* Compute throughput estimate (cores x max SM clock) that CUDA's
	 * default FASTEST_FIRST device order follows; higher comes first. */
	GM_GPU_CUDA_RANK = 12,
	/* Clocks in MHz (0.3.0): now (NVML's nvmlDeviceGetClockInfo) and the
	 * most the GPU may run at (nvmlDeviceGetMaxClockInfo).  An idle GPU
	 * clocks down: 210 MHz SM is a normal reading, not a fault. */
	GM_GPU_CLOCK_SM_MHZ = 13,
	GM_GPU_CLOCK_MEM_MHZ = 14,
	GM_GPU_CLOCK_GRAPHICS_MHZ = 15,
	GM_GPU_MAX_CLOCK_SM_MHZ = 16,
	GM_GPU_MAX_CLOCK_MEM_MHZ = 17,
	GM_GPU_MAX_CLOCK_GRAPHICS_MHZ = 18,
	/* Persistence mode (nvmlDeviceGetPersistenceMode): 1 on, 0 off (the
	 * driver takes the GPU down when no program holds it open). */
	GM_GPU_PERSISTENCE_MODE = 19,
	/* The N of the GPU's device node /dev/nvidiaN (nvmlDeviceGetMinorNumber):
	 * what a device filter names it by. */
	GM_GPU_MINOR_NUMBER = 20,
	/* The speed the fan is meant to run at, % of its most
	 * (nvmlDeviceGetFanSpeed); a GPU cooled by its chassis has none. */
	GM_GPU_FAN_SPEED_PCT = 21
};
/*
 * One reading of the GPU: 1 and *out set when the GPU reported it; 0 when
 * it is "not supported" or was unreadable (a state of its own, never a
 * zero), or what is not known to this library (a program built against a
 * newer header).
 */
GM_API int gm_gpu_value(const struct gm_gpu *gpu, enum gm_gpu_value what, int64_t *out);

GM_API unsigned gm_proc_pid(const struct gm_proc *proc);
GM_API unsigned gm_proc_gpu(const struct gm_proc *proc);  /* NVML index of its GPU */
GM_API unsigned gm_proc_kind(const struct gm_proc *proc); /* enum gm_proc_kind bits */
/* 1 and *out set when known: NVML's count of its memory; its owner. */
GM_API int gm_proc_used_mib(const struct gm_proc *proc, uint64_t *out);
GM_API int gm_proc_uid(const struct gm_proc *proc, unsigned *out);
GM_API const char *gm_proc_user(const struct gm_proc *proc);    /* "" if hidden */
GM_API const char *gm_proc_command(const struct gm_proc *proc); /* "" if hidden */

/* ---- MIG slices ------------------------------------------------------- */

/*
 * A GPU in MIG mode (GM_GPU_MIG_MODE 1) is split into slices, each a device
 * of its own for CUDA (CUDA_VISIBLE_DEVICES=MIG-<uuid>); gpuman never hands
 * such a GPU out whole.  Opaque like gm_gpu; pointers live as long as the
 * snapshot.  A driver without the MIG calls (before R450) shows none.
 */
struct gm_mig;

/* Bits of gm_mig_valid(). */
enum gm_mig_field {
	GM_MIG_HAS_MEMORY = 1u << 0,   /* GM_MIG_MEM_TOTAL/FREE/USED_MIB */
	GM_MIG_HAS_INSTANCE = 1u << 1, /* GM_MIG_GPU/COMPUTE_INSTANCE_ID */
	GM_MIG_HAS_PROCESSES = 1u << 2 /* gm_proc_mig() knows its processes */
};

/* Append-only, like enum gm_gpu_value. */
enum gm_mig_value {
	GM_MIG_MEM_TOTAL_MIB = 0,
	GM_MIG_MEM_FREE_MIB = 1,
	GM_MIG_MEM_USED_MIB = 2,
	GM_MIG_GPU_INSTANCE_ID = 3,
	GM_MIG_COMPUTE_INSTANCE_ID = 4
};

/* Slices of every GPU, sorted by GPU, then GPU instance id.  i past the
 * count gives NULL. */
GM_API size_t gm_snapshot_mig_count(const struct gm_snapshot *snap);
GM_API const struct gm_mig *gm_snapshot_mig(const struct gm_snapshot *snap, size_t i);
GM_API unsigned gm_mig_gpu(const struct gm_mig *mig);     /* NVML index of its GPU */
GM_API const char *gm_mig_uuid(const struct gm_mig *mig); /* "MIG-..."; "" */
GM_API const char *gm_mig_name(const struct gm_mig *mig);
GM_API const char *gm_mig_profile(const struct gm_mig *mig); /* "1g.10gb"; "" */
GM_API unsigned gm_mig_valid(const struct gm_mig *mig);      /* enum gm_mig_field bits */
/* 1 and *out set when the slice reported it; 0 otherwise. */
GM_API int gm_mig_value(const struct gm_mig *mig, enum gm_mig_value what, int64_t *out);
/* The slice a process of snap runs in; NULL when none or not known. */
GM_API const struct gm_mig *gm_proc_mig(const struct gm_snapshot *snap, const struct gm_proc *proc);

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
 *   NULL: forever), "mig" PROFILE (one MIG slice of this profile, e.g.
 *   "1g.10gb", or "any": a lease then holds the slice, and its
 *   gm_lease_gpu_uuid and gm_lease_cuda_visible are the slice's "MIG-..."
 *   UUID; not with "mem" or an "n" above 1).
 * SIZE: 8192 (MiB), 8G, 8GiB, 512M, 1T, 50%.  DURATION: 90, 90s, 15m, 2h,
 * 1h30m.  LIST: NVML indices, ranges of them (0-3) or UUID prefixes, comma
 * separated.
 * GM_ERR_INVALID with a message naming the option on bad input; the
 * request is then as it was.
 */
GM_API enum gm_err gm_request_set(struct gm_request *req, const char *key, const char *value,
                                  char *errbuf, size_t errlen);
/* An independent copy (free with gm_request_free); NULL when out of memory. */
GM_API struct gm_request *gm_request_dup(const struct gm_request *req);
/*
 * The request as command-line options, defaults left out: "-n 2 --by util
 * --mem 8G --wait=15m" ("" for the defaults).  Each option, given back to
 * gm_request_set, makes the same request.  Caller frees (gm_free); NULL
 * when out of memory.
 */
GM_API char *gm_request_text(const struct gm_request *req);

/* ---- choosing without reserving --------------------------------------- */

/*
 * Choose GPUs for req from a snapshot and the live leases, as gm_acquire
 * would, without leasing them.  Only GPUs in an inherited
 * CUDA_VISIBLE_DEVICES are candidates.  On GM_OK, *indices (caller frees)
 * holds *count NVML indices in policy order (for a "mig" request, the index
 * of the chosen slice's GPU).  GM_ERR_UNAVAILABLE: not now;
 * GM_ERR_NEVER: not on this machine, whatever frees up; GM_ERR_NOMEM.  If
 * explain is not NULL, *explain (caller frees with gm_free) gets one line
 * per GPU not chosen, on success too, saying which condition excluded it ("GPU 3 (NVIDIA TITAN
 * RTX): only 812 MiB free, --min-free asks 8 GiB"); on another error, what
 * went wrong ("the lease broker at ... does not answer ...").
 */
GM_API enum gm_err gm_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                           const struct gm_request *req, unsigned **indices, size_t *count,
                           char **explain);

/* ---- leases ----------------------------------------------------------- */

/*
 * Every live lease and waiting request of the machine (all users), as the
 * JSON object {"leases": [...], "waiters": [...]} whose members are those
 * of `gpuman status --json`; the lease broker lists the first 256 waiters
 * (2048 leases) and counts the rest per user in "waiters_more" ("leases_more"),
 * absent when nothing is left out.  On GM_OK *json is the text (caller
 * frees with gm_free); GM_ERR_STATE when the state directory is unusable.
 */
GM_API enum gm_err gm_leases_json(char **json, char *errbuf, size_t errlen);

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

/* ---- reservations (0.4.0) --------------------------------------------- */

/*
 * A reservation (`gpuman reserve`) is a lease that no process holds: its
 * GPUs are kept from every other user until it expires or is released,
 * whether or not this process still runs, for interactive work started
 * later (a notebook, a debugger) with its CUDA_VISIBLE_DEVICES.  With
 * GPUMAN_RESERVATION set to its id, the owner's own gm_acquire (and gpuman
 * run) leases inside it.  The admin's max_reserve (gpuman.conf) bounds its
 * duration.  A gm_reservation is this process's copy of what was granted:
 * freeing it (gm_reservation_free) does not end the reservation.
 */
struct gm_reservation;

/*
 * Choose GPUs for req, as gm_acquire would, and reserve them for duration
 * ("90m", "4h", "1h30m"; a bare number is seconds, as DURATION of
 * gm_request_set).  "wait" on req waits first (gm_cancel ends the wait);
 * "mig" is refused (GM_ERR_INVALID: reserve the GPU).  GM_ERR_INVALID names
 * a bad or missing duration, or one over max_reserve;
 * GM_ERR_UNAVAILABLE / GM_ERR_TIMEOUT / GM_ERR_NEVER say per GPU why.  On
 * failure *out is NULL.
 */
GM_API enum gm_err gm_reserve(struct gm_context *ctx, const struct gm_request *req,
                              const char *duration, struct gm_reservation **out, char *errbuf,
                              size_t errlen);
/* Free this process's copy; the reservation lives on.  NULL is allowed. */
GM_API void gm_reservation_free(struct gm_reservation *resv);
/* Pointers returned live as long as resv. */
GM_API const char *gm_reservation_id(const struct gm_reservation *resv);
GM_API size_t gm_reservation_gpu_count(const struct gm_reservation *resv);
/* NVML index / UUID of its i-th GPU (best first); i past the count: 0, "". */
GM_API unsigned gm_reservation_gpu_index(const struct gm_reservation *resv, size_t i);
GM_API const char *gm_reservation_gpu_uuid(const struct gm_reservation *resv, size_t i);
/* The value for CUDA_VISIBLE_DEVICES (full UUIDs), and for GPUMAN_GPUS. */
GM_API const char *gm_reservation_cuda_visible(const struct gm_reservation *resv);
GM_API const char *gm_reservation_indices(const struct gm_reservation *resv);
/* When it ends by itself: wall-clock milliseconds since the epoch. */
GM_API int64_t gm_reservation_expires_ms(const struct gm_reservation *resv);

/*
 * End reservation id now, the caller's own (root: anyone's); its GPUs go to
 * the next in line.  GM_ERR_INVALID when there is no live reservation of
 * that id (expired?) or it is another user's (errbuf names the owner).
 */
GM_API enum gm_err gm_release_reservation(const char *id, char *errbuf, size_t errlen);

/*
 * Every live reservation of the machine (all users), as the JSON object
 * {"reservations": [...]} whose members are those of gm_leases_json's
 * leases (each with "reservation": true and "expires_ms").  On GM_OK *json
 * is the text (caller frees with gm_free); GM_ERR_STATE when the state
 * directory is unusable.
 */
GM_API enum gm_err gm_reservations_json(char **json, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* GPUMAN_H */
