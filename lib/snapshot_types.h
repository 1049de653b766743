/*
 * snapshot_types.h - the layouts behind the opaque gm_snapshot, gm_gpu and
 * gm_proc of gpuman.h, for the library and, until it lives on the
 * accessors, the gpuman command.  Programs built against this gpuman.h see
 * only the accessors (lib/snapshot_access.c).  Binaries built against
 * 0.1.0's, which published these structs and index gpus[] and procs[]
 * directly, need libgpuman.so.0, and the soname libgpuman.so.1 keeps them
 * from loading this library.  So fields may be added here freely; a value
 * for programs gets an accessor (a new enum gm_gpu_value or function).
 */
#ifndef GM_SNAPSHOT_TYPES_H
#define GM_SNAPSHOT_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"

struct gm_gpu {
	unsigned index; /* NVML index (PCI bus order) */
	enum gm_gpu_state state;
	char note[160]; /* why the state is not OK, for people */
	char uuid[96];  /* "GPU-..." (empty if unreadable) */
	char name[96];
	char pci_bus_id[32]; /* "00000000:02:00.0" */
	unsigned valid;      /* enum gm_field bits */
	uint64_t mem_total_mib, mem_free_mib, mem_used_mib;
	unsigned util_gpu_pct, util_mem_pct;
	unsigned power_mw, power_limit_mw;
	unsigned temperature_c;
	int cc_major, cc_minor;
	int compute_mode;     /* enum gm_compute_mode */
	int mig_mode;         /* 0 disabled, 1 enabled */
	int persistence_mode; /* 0 off, 1 on: valid by GM_HAS_PERSISTENCE */
	int minor;            /* /dev/nvidiaN's N (NVML's minor number); -1 unknown */
	/* Compute throughput estimate (cores x max SM clock) that CUDA's default
	 * FASTEST_FIRST device order follows; higher comes first. */
	uint64_t cuda_rank;
	/* Current and maximum clocks, MHz: [enum gm_clock], valid by the
	 * GM_HAS_CLOCK_* and GM_HAS_MAX_CLOCK_* bits. */
	unsigned clock_mhz[GM_CLOCK_COUNT], clock_max_mhz[GM_CLOCK_COUNT];
	unsigned fan_speed_pct;
};

struct gm_proc {
	unsigned pid;
	unsigned gpu; /* NVML index of its GPU */
	int has_mem;  /* 0 when NVML does not report its memory */
	uint64_t used_mib;
	unsigned kind; /* enum gm_proc_kind bits */
	int mps;       /* an MPS client (in NVML's MPS list): kind has COMPUTE */
	int has_user;  /* /proc showed the owner */
	unsigned uid;
	char user[33];
	char command[256]; /* command line, empty if /proc hides it */
	/* SM utilization of this process on this GPU over the recent samples
	 * (gpuman status/ps/top/waste ask for it; gm_snapshot_take does not,
	 * to stay fast): has_util 0 when not asked or not reported. */
	int has_util;
	unsigned util_pct;
};

/* One MIG slice (MIG device) of a GPU in MIG mode: a device of its own for
 * CUDA (CUDA_VISIBLE_DEVICES=MIG-<uuid>). */
struct gm_mig {
	unsigned gpu;     /* NVML index of its GPU */
	char uuid[96];    /* "MIG-..." (empty if unreadable) */
	char name[96];    /* "NVIDIA A100-SXM4-80GB MIG 1g.10gb" */
	char profile[32]; /* "1g.10gb"; empty if the name does not say */
	unsigned valid;   /* enum gm_mig_field bits */
	uint64_t mem_total_mib, mem_free_mib, mem_used_mib;
	unsigned gpu_instance_id, compute_instance_id;
	size_t pid_count;
	unsigned *pids; /* processes running in the slice, sorted; owned */
};

struct gm_snapshot {
	char driver_version[80]; /* empty if unknown */
	int cuda_driver_version; /* 13000 means 13.0; 0 if unknown */
	size_t gpu_count;
	struct gm_gpu *gpus; /* sorted by NVML index */
	size_t proc_count;
	struct gm_proc *procs; /* sorted by GPU, then pid */
	size_t note_count;
	char **notes;     /* GPUs skipped and other remarks, for people */
	int64_t taken_ms; /* wall-clock time of the snapshot */
	/* MIG slices, read through gm_snapshot_mig() */
	size_t mig_count;
	struct gm_mig *migs; /* sorted by GPU, then GPU instance id */
	/* How long the reading NVML session's nvmlInit took (ms): what a
	 * program that opens the driver itself pays here. */
	double nvml_init_ms;
	/* Who read it: 0 this process; 1 the lease broker, which holds the
	 * one NVML session of the machine (then age_ms is how old the
	 * reading was when the broker sent it). */
	int from_broker;
	int64_t age_ms;
	/* The broker's view (its "view" answer, one line) sent with the
	 * reading to a context that wants it (context_want_view()); NULL none.
	 * view_got_ms: when it came (monotonic), so that an old snapshot's
	 * leases are read again (registry_read_with()). */
	char *view_text;
	int64_t view_got_ms;
};

#endif
