/*
 * context.h - what a gm_context holds, for the library's modules.
 */
#ifndef GM_CONTEXT_H
#define GM_CONTEXT_H

#include <limits.h>
#include "gpuman.h"
#include "nvml.h"

struct gm_context {
	struct nvml *nvml;
	char nvml_path[PATH_MAX]; /* what was loaded, for messages */
	int cancel_fd;            /* eventfd that gm_cancel() signals */
};

#endif
