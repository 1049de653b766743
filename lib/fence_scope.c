/*
 * fence_scope.c - where systemd is PID 1, a lease's cgroup is not a folder
 * made behind its back but a transient scope unit that systemd makes and
 * delegates to gpuman (fence.h): "gpuman-<lease>.scope" in the slice
 * "gpuman.slice", which the admin sees in systemctl and systemd-cgls and
 * can stop.  gpuman asks for it with StartTransientUnit on
 * org.freedesktop.systemd1.Manager, naming the job's pid, waits for the
 * start job, then makes the cgroup "job" inside the delegated scope and
 * attaches its device filter there, as on a machine without systemd.
 *
 * The D-Bus client is libsystemd's sd-bus, loaded at run time: a broker
 * where libsystemd is missing (or that was built without libsystemd-dev)
 * starts as before and makes plain folders, and says why.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fence.h"
#include "util.h"

#if defined(__has_include)
#if __has_include(<systemd/sd-bus.h>)
#include <systemd/sd-bus.h>
#define FENCE_HAVE_SD_BUS 1
#endif
#endif

/* How long placing a job may wait for systemd: the broker's loop waits
 * with it (systemd answers in milliseconds; a hung one fails the grant
 * after this, never the broker). */
#define SCOPE_PATIENCE_MS 5000
/* How often the wait looks for the pid in its scope meanwhile: a manager
 * that sends no JobRemoved to us is not waited for in full. */
#define SCOPE_LOOK_MS 50

int fence_systemd_wanted(void)
{
	const char *bus = getenv("GPUMAN_SYSTEMD_BUS");
	struct stat st;

	if (bus && *bus)
		return 1;
	/* sd_booted(): systemd as PID 1 makes this directory early at boot */
	return lstat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
}

/* "a-b-c.slice" lives at a.slice/a-b.slice/a-b-c.slice (systemd.slice(5)). */
int fence_slice_path(const char *slice, char *out, size_t len)
{
	const char *end = strstr(slice, ".slice");
	size_t n = 0, stem = end ? (size_t)(end - slice) : 0;

	if (!end || end[6] || !stem || slice[0] == '-' || slice[stem - 1] == '-' ||
	    strstr(slice, "--") ||
	    strspn(slice, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                  "0123456789_-") != stem)
		return -1;
	out[0] = '\0';
	for (size_t i = 0; i <= stem; i++) {
		if (i < stem && slice[i] != '-')
			continue;
		if (n + i + 8 >= len)
			return -1;
		n +=
		    (size_t)snprintf(out + n, len - n, "%s%.*s.slice", n ? "/" : "", (int)i, slice);
	}
	return 0;
}

void fence_scope_unit(const struct fence *f, const char *id, char *out, size_t len)
{
	snprintf(out, len, "%s-%s.scope", f->unit_prefix, id);
}

void fence_scope_dir(const struct fence *f, const char *id, char *out, size_t len)
{
	char unit[160];

	fence_scope_unit(f, id, unit, sizeof unit);
	snprintf(out, len, "%s/%s", f->scope_root, unit);
}

#ifdef FENCE_HAVE_SD_BUS

/* The part of sd-bus we use, by the header's own types. */
static struct {
	void *lib;
	__typeof__(sd_bus_new) *bus_new;
	__typeof__(sd_bus_set_address) *set_address;
	__typeof__(sd_bus_set_bus_client) *set_bus_client;
	__typeof__(sd_bus_start) *start;
	__typeof__(sd_bus_open_system) *open_system;
	__typeof__(sd_bus_flush_close_unref) *close_unref;
	__typeof__(sd_bus_message_new_method_call) *new_call;
	__typeof__(sd_bus_message_append) *append;
	__typeof__(sd_bus_message_open_container) *open_container;
	__typeof__(sd_bus_message_close_container) *close_container;
	__typeof__(sd_bus_call) *call;
	__typeof__(sd_bus_call_method) *call_method;
	__typeof__(sd_bus_message_read) *read;
	__typeof__(sd_bus_message_unref) *message_unref;
	__typeof__(sd_bus_error_free) *error_free;
	__typeof__(sd_bus_match_signal) *match_signal;
	__typeof__(sd_bus_slot_unref) *slot_unref;
	__typeof__(sd_bus_process) *process;
	__typeof__(sd_bus_wait) *wait;
} sd;

int fence_systemd_load(char *err, size_t len)
{
	void *lib;

	if (sd.lib)
		return 0;
	lib = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return gm_fail(GM_ERR_STATE, err, len, "cannot load libsystemd.so.0: %s",
		               dlerror()),
		       -1;
#define SYM(field, name)                                                                           \
	if (!(*(void **)&sd.field = dlsym(lib, #name))) {                                          \
		gm_fail(GM_ERR_STATE, err, len, "libsystemd.so.0 has no %s (too old)", #name);     \
		dlclose(lib);                                                                      \
		return -1;                                                                         \
	}
	SYM(bus_new, sd_bus_new)
	SYM(set_address, sd_bus_set_address)
	SYM(set_bus_client, sd_bus_set_bus_client)
	SYM(start, sd_bus_start)
	SYM(open_system, sd_bus_open_system)
	SYM(close_unref, sd_bus_flush_close_unref)
	SYM(new_call, sd_bus_message_new_method_call)
	SYM(append, sd_bus_message_append)
	SYM(open_container, sd_bus_message_open_container)
	SYM(close_container, sd_bus_message_close_container)
	SYM(call, sd_bus_call)
	SYM(call_method, sd_bus_call_method)
	SYM(read, sd_bus_message_read)
	SYM(message_unref, sd_bus_message_unref)
	SYM(error_free, sd_bus_error_free)
	SYM(match_signal, sd_bus_match_signal)
	SYM(slot_unref, sd_bus_slot_unref)
	SYM(process, sd_bus_process)
	SYM(wait, sd_bus_wait)
#undef SYM
	sd.lib = lib;
	return 0;
}

/* The manager's bus: GPUMAN_SYSTEMD_BUS (a D-Bus address; a test's
 * stand-in on a private bus daemon), else as root systemd's own private
 * socket, which needs no dbus-daemon (as systemctl does), else the system
 * bus.  *client: whether it is a bus with a daemon (names, senders). */
static int bus_open(sd_bus **bus, int *client, char *err, size_t len)
{
	const char *addr = getenv("GPUMAN_SYSTEMD_BUS");
	int r = -EINVAL;

	*bus = NULL;
	*client = 1;
	if ((!addr || !*addr) && geteuid() == 0 && access("/run/systemd/private", F_OK) == 0 &&
	    sd.bus_new(bus) >= 0) {
		if (sd.set_address(*bus, "unix:path=/run/systemd/private") >= 0 &&
		    sd.start(*bus) >= 0) {
			*client = 0;
			return 0;
		}
		*bus = sd.close_unref(*bus);
	}
	if (addr && *addr) {
		if ((r = sd.bus_new(bus)) >= 0 && (r = sd.set_address(*bus, addr)) >= 0 &&
		    (r = sd.set_bus_client(*bus, 1)) >= 0 && (r = sd.start(*bus)) >= 0)
			return 0;
		*bus = sd.close_unref(*bus);
	} else if ((r = sd.open_system(bus)) >= 0) {
		return 0;
	}
	gm_fail(GM_ERR_STATE, err, len, "cannot reach systemd on %s: %s",
	        addr && *addr ? addr : "the system bus", strerror(-r));
	return -1;
}

/* What the wait learns from the manager's JobRemoved signals. */
struct job_wait {
	const char *path; /* the job we wait for */
	int done;
	char result[32];
};

static int job_removed(sd_bus_message *m, void *data, sd_bus_error *e)
{
	struct job_wait *w = data;
	const char *path = NULL, *unit = NULL, *result = NULL;
	uint32_t id;

	(void)e;
	if (w->path && sd.read(m, "uoss", &id, &path, &unit, &result) >= 0 && path &&
	    !strcmp(path, w->path)) {
		w->done = 1;
		str_copy(w->result, sizeof w->result, result ? result : "");
	}
	return 0;
}

/* StartTransientUnit(name, "fail", properties, no auxiliary units): the
 * request systemd-run --scope sends, less what it adds for a terminal. */
static int start_unit(sd_bus *bus, const char *unit, const char *slice, const char *description,
                      int pid, char *job, size_t job_len, char *err, size_t len)
{
	sd_bus_message *m = NULL, *reply = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	const char *path = NULL;
	int r;

	r = sd.new_call(bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
	                "org.freedesktop.systemd1.Manager", "StartTransientUnit");
	if (r >= 0)
		r = sd.append(m, "ss", unit, "fail");
	if (r >= 0)
		r = sd.open_container(m, 'a', "(sv)");
	if (r >= 0)
		r = sd.append(m, "(sv)", "Description", "s", description);
	if (r >= 0)
		r = sd.append(m, "(sv)", "Slice", "s", slice);
	/* The cgroup below the scope is gpuman's: its device filter, its
	 * job (systemd.resource-control(5), Delegate=). */
	if (r >= 0)
		r = sd.append(m, "(sv)", "Delegate", "b", 1);
	/* A scope that failed is not kept around for the admin to reset. */
	if (r >= 0)
		r = sd.append(m, "(sv)", "CollectMode", "s", "inactive-or-failed");
	if (r >= 0)
		r = sd.append(m, "(sv)", "PIDs", "au", 1, (uint32_t)pid);
	if (r >= 0)
		r = sd.close_container(m);
	if (r >= 0)
		r = sd.append(m, "a(sa(sv))", 0);
	if (r < 0) {
		gm_fail(GM_ERR_NOMEM, err, len, "cannot build the request for '%s': %s", unit,
		        strerror(-r));
		goto done;
	}
	r = sd.call(bus, m, (uint64_t)SCOPE_PATIENCE_MS * 1000, &e, &reply);
	if (r >= 0)
		r = sd.read(reply, "o", &path);
	if (r < 0 || !path) {
		gm_fail(GM_ERR_STATE, err, len, "systemd did not make the scope '%s': %s", unit,
		        e.message ? e.message : strerror(r < 0 ? -r : EPROTO));
		r = -1;
		goto done;
	}
	str_copy(job, job_len, path);
	r = 0;
done:
	sd.error_free(&e);
	if (reply)
		sd.message_unref(reply);
	if (m)
		sd.message_unref(m);
	return r;
}

int fence_scope_start(const struct fence *f, const char *id, int pid, const char *description,
                      char *err, size_t len)
{
	char unit[160], dir[PATH_MAX], here[PATH_MAX] = "", job[256] = "";
	struct job_wait w = {NULL, 0, ""};
	sd_bus_slot *slot = NULL;
	sd_bus *bus = NULL;
	struct stat st;
	int64_t give_up = monotonic_ms() + SCOPE_PATIENCE_MS;
	int client, rc = -1;

	fence_scope_unit(f, id, unit, sizeof unit);
	fence_scope_dir(f, id, dir, sizeof dir);
	/* A broker before this one made it (a restart): it is there still. */
	if (stat(dir, &st) == 0)
		return 0;
	if (fence_systemd_load(err, len) < 0 || bus_open(&bus, &client, err, len) < 0)
		return -1;
	/* Before the call, so that no JobRemoved is missed.  On the system
	 * bus the manager sends it to subscribers only; on its private socket
	 * (no sender there) to everyone. */
	if (sd.match_signal(bus, &slot, client ? "org.freedesktop.systemd1" : NULL,
	                    "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager",
	                    "JobRemoved", job_removed, &w) < 0)
		slot = NULL;
	sd.call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
	               "org.freedesktop.systemd1.Manager", "Subscribe", NULL, NULL, "");
	if (start_unit(bus, unit, f->slice, description, pid, job, sizeof job, err, len) < 0)
		goto done;
	w.path = job;
	/* The scope's start job moves the pid; it may be done already. */
	for (;;) {
		int64_t left = give_up - monotonic_ms();
		int r = sd.process(bus, NULL);

		if (r > 0 && !w.done && left > 0)
			continue; /* more may be queued */
		if (w.done ||
		    (f->ops && f->ops->where(f, pid, here, sizeof here) == 0 &&
		     !strcmp(here, dir)) ||
		    r < 0 || left <= 0)
			break;
		sd.wait(bus, (uint64_t)(left < SCOPE_LOOK_MS ? left : SCOPE_LOOK_MS) * 1000);
	}
	if (w.done && strcmp(w.result, "done")) {
		gm_fail(GM_ERR_STATE, err, len, "systemd's job to start '%s' ended '%s'", unit,
		        w.result);
		goto done;
	}
	if (!f->ops || f->ops->where(f, pid, here, sizeof here) < 0 || strcmp(here, dir)) {
		gm_fail(GM_ERR_STATE, err, len,
		        "systemd did not put pid %d in '%s' within %d ms (it is in '%s')", pid, dir,
		        SCOPE_PATIENCE_MS, f->ops && here[0] ? here : "?");
		goto done;
	}
	rc = 0;
done:
	if (slot)
		sd.slot_unref(slot);
	sd.close_unref(bus);
	return rc;
}

#else /* built without libsystemd-dev */

int fence_systemd_load(char *err, size_t len)
{
	return gm_fail(GM_ERR_STATE, err, len, "gpuman was built without libsystemd-dev (sd-bus)"),
	       -1;
}

int fence_scope_start(const struct fence *f, const char *id, int pid, const char *description,
                      char *err, size_t len)
{
	(void)f, (void)id, (void)pid, (void)description;
	return fence_systemd_load(err, len);
}

#endif
