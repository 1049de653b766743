/*
 * context.c - opening a context (which NVML to load), error strings, the
 * version and gm_free.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <jansson.h>
#include "broker_wire.h"
#include "context.h"
#include "util.h"

GM_API const char *gm_strerror(enum gm_err err)
{
	switch (err) {
	case GM_OK:
		return "success";
	case GM_ERR_NOMEM:
		return "out of memory";
	case GM_ERR_INVALID:
		return "invalid argument";
	case GM_ERR_NVML_LOAD:
		return "the NVML library could not be loaded";
	case GM_ERR_NVML:
		return "NVML error";
	case GM_ERR_SCENARIO:
		return "malformed simulator scenario";
	case GM_ERR_UNAVAILABLE:
		return "the request cannot be met now";
	case GM_ERR_TIMEOUT:
		return "timed out waiting for GPUs";
	case GM_ERR_STATE:
		return "the state directory is unusable";
	case GM_ERR_IO:
		return "input/output error";
	case GM_ERR_NOT_FOUND:
		return "not found";
	case GM_ERR_INTERRUPTED:
		return "interrupted";
	case GM_ERR_NEVER:
		return "the request can never be met on this machine";
	}
	return "unknown error";
}

GM_API const char *gm_version(void)
{
	return GM_VERSION_STRING;
}

GM_API unsigned gm_version_number(void)
{
	return GM_VERSION;
}

GM_API void gm_free(void *ptr)
{
	free(ptr);
}

/*
 * The simulator ships beside gpuman: in the build tree as sim/ next to the
 * binary or library, installed as $PREFIX/lib/gpuman/.  Find it relative to the
 * object that holds this code, so both layouts work without configuration.
 */
static int find_simulator(char *out, size_t len)
{
	static const char *const rel[] = {
	    "sim/libnvidia-ml.so.1",
	    "gpuman/libnvidia-ml.so.1",
	    "../lib/gpuman/libnvidia-ml.so.1",
	    "../gpuman/libnvidia-ml.so.1", /* from a multiarch libdir */
	    "../sim/libnvidia-ml.so.1",
	};
	char dir[PATH_MAX];
	Dl_info info;
	size_t i;

	/* For the main program dladdr may give the name it was run by, with
	 * no directory: then /proc/self/exe says where it is. */
	if (dladdr((void *)find_simulator, &info) && info.dli_fname) {
		char *slash;

		if (!strchr(info.dli_fname, '/') || !realpath(info.dli_fname, dir)) {
			ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);

			dir[n > 0 ? n : 0] = '\0';
		}
		slash = strrchr(dir, '/');
		if (slash) {
			*slash = '\0';
			for (i = 0; i < ARRAY_SIZE(rel); i++) {
				snprintf(out, len, "%s/%s", dir, rel[i]);
				if (access(out, R_OK) == 0)
					return 0;
			}
		}
	}
	snprintf(out, len, "%s/libnvidia-ml.so.1", GM_PKGLIBDIR);
	return access(out, R_OK) == 0 ? 0 : -1;
}

/*
 * The simulator is built once per driver branch (GM_SIM_BRANCHES, oldest
 * first, from the Makefile), each exporting exactly the functions its
 * branch had: the newest is the default library, the older ones are in r390/,
 * r470/, ... beside it.  The default library refuses a scenario of an older
 * driver as a real library refuses another version's kernel module; then use
 * the one of the scenario's driver: the newest branch not newer than it, the
 * oldest for older drivers.  (Reading the scenario only then spares every
 * other start a parse of it that no real driver would cost.)  Without a
 * readable driver version, or without that directory, the path is left as
 * it was.
 */
static void simulator_for_scenario(char *path, size_t len, const char *scenario)
{
	static const unsigned branches[] = {GM_SIM_BRANCHES};
	const size_t nb = sizeof branches / sizeof branches[0];
	json_t *root = json_load_file(scenario, 0, NULL);
	const char *v = json_string_value(json_object_get(root, "driver_version"));
	unsigned major = v ? (unsigned)atoi(v) : 0, b = branches[0];
	char lib[PATH_MAX + 64], *slash;

	json_decref(root);
	if (!major)
		return;
	for (size_t i = 0; i < nb; i++)
		if (branches[i] <= major)
			b = branches[i];
	slash = strrchr(path, '/');
	if (b == branches[nb - 1] || !slash)
		return;
	snprintf(lib, sizeof lib, "%.*s/r%u/libnvidia-ml.so.1", (int)(slash - path), path, b);
	if (access(lib, R_OK) == 0 && strlen(lib) < len)
		memcpy(path, lib, strlen(lib) + 1);
}

static enum gm_err context_open(struct gm_context **out, int local, char *errbuf, size_t errlen)
{
	struct gm_context *ctx;
	enum gm_err err;

	*out = NULL;
	ctx = calloc(1, sizeof *ctx);
	if (!ctx)
		return gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory");
	ctx->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	/* Where a broker runs it holds the machine's NVML session: ask it,
	 * and never pay the driver's start-up here (nor find, load or
	 * configure the library). */
	if (!local && broker_wanted(ctx->broker, sizeof ctx->broker)) {
		*out = ctx;
		return GM_OK;
	}
	ctx->broker[0] = '\0';
	err = context_load_nvml(ctx, errbuf, errlen);
	if (err != GM_OK) {
		if (ctx->cancel_fd >= 0)
			close(ctx->cancel_fd);
		free(ctx);
		return err;
	}
	*out = ctx;
	return GM_OK;
}

void context_want_view(struct gm_context *ctx)
{
	if (ctx)
		ctx->want_view = 1;
}

enum gm_err context_load_nvml(struct gm_context *ctx, char *errbuf, size_t errlen)
{
	const char *path = getenv("GPUMAN_NVML");
	const char *sim = getenv("GPUMAN_SIM");
	enum gm_err err;

	if (path && *path) {
		snprintf(ctx->nvml_path, sizeof ctx->nvml_path, "%s", path);
	} else if (sim && *sim) {
		if (find_simulator(ctx->nvml_path, sizeof ctx->nvml_path) < 0)
			return gm_fail(GM_ERR_NVML_LOAD, errbuf, errlen,
			               "GPUMAN_SIM is set but the simulator library was not found "
			               "(looked beside gpuman and in '%s'); set GPUMAN_NVML to "
			               "its path",
			               GM_PKGLIBDIR);
	}
	err = nvml_open(ctx->nvml_path[0] ? ctx->nvml_path : NULL, &ctx->nvml, errbuf, errlen);
	if (err != GM_OK && !(path && *path) && sim && *sim && nvml_wrong_version(ctx->nvml_path)) {
		char first[sizeof ctx->nvml_path];

		snprintf(first, sizeof first, "%s", ctx->nvml_path);
		simulator_for_scenario(ctx->nvml_path, sizeof ctx->nvml_path, sim);
		if (strcmp(first, ctx->nvml_path))
			err = nvml_open(ctx->nvml_path, &ctx->nvml, errbuf, errlen);
	}
	if (err == GM_OK && !ctx->nvml_path[0])
		snprintf(ctx->nvml_path, sizeof ctx->nvml_path, "libnvidia-ml.so.1");
	return err;
}

GM_API enum gm_err gm_open(struct gm_context **out, char *errbuf, size_t errlen)
{
	return context_open(out, 0, errbuf, errlen);
}

enum gm_err context_open_local(struct gm_context **out, char *errbuf, size_t errlen)
{
	return context_open(out, 1, errbuf, errlen);
}

GM_API void gm_close(struct gm_context *ctx)
{
	if (!ctx)
		return;
	nvml_close(ctx->nvml);
	if (ctx->cancel_fd >= 0)
		close(ctx->cancel_fd);
	free(ctx);
}

GM_API const char *gm_context_nvml_path(const struct gm_context *ctx)
{
	return ctx->nvml_path[0] ? ctx->nvml_path : "libnvidia-ml.so.1";
}
