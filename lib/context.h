/*
 * context.h - what a gm_context holds, for the library's modules.
 */
#ifndef GM_CONTEXT_H
#define GM_CONTEXT_H

#include <limits.h>
#include "gpuman.h"
#include "nvml.h"

struct gm_context {
	struct nvml *nvml;        /* NULL while the broker reads the GPUs for us */
	char nvml_path[PATH_MAX]; /* what was (or would be) loaded, for messages */
	int cancel_fd;            /* eventfd that gm_cancel() signals */
	/* The lease broker whose NVML session answers our snapshots, "" none:
	 * where a broker runs, a client never loads NVML (one session per
	 * machine, its start-up paid once). */
	char broker[PATH_MAX];
	/* Ask the broker for its view with each reading (context_want_view). */
	int want_view;
};

/*
 * A caller that will read the leases and the line right after its snapshot
 * (status, pick) asks for both at once: where the broker reads the GPUs,
 * each snapshot then carries its view, and registry_read_with() reads
 * that instead of asking again (one round trip instead of two).
 */
void context_want_view(struct gm_context *ctx);

/*
 * gm_open for the process that holds the machine's NVML session (the
 * broker): NVML is loaded here, whatever broker GPUMAN_BROKER names.
 */
enum gm_err context_open_local(struct gm_context **out, char *errbuf, size_t errlen);

/* Load NVML now in a context that was asking the broker (it does not
 * answer): 0, or -1 with errbuf set. */
enum gm_err context_load_nvml(struct gm_context *ctx, char *errbuf, size_t errlen);

#endif
