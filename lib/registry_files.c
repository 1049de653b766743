/*
 * registry_files.c - writing the registry: a ticket or a lease is created
 * under a temporary name, locked, made readable by all, written and renamed
 * into place, so that no reader sees an unlocked live file.  See registry.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "caps.h"
#include "context.h"
#include "lease.h"
#include "parse.h"
#include "pick.h"
#include "line.h"
#include "proctree.h"
#include "record.h"
#include "policy.h"
#include "registry.h"
#include "snapshot.h"
#include "text.h"
#include "util.h"
#include "registry_impl.h"

/* ---- publishing files --------------------------------------------------- */

static void random_id(char *buf, size_t len)
{
	unsigned r = 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd < 0 || read(fd, &r, sizeof r) != (ssize_t)sizeof r)
		r = (unsigned)(now_ms() ^ ((int64_t)getpid() << 16));
	if (fd >= 0)
		close(fd);
	snprintf(buf, len, "%lld-%d-%08x", (long long)now_ms(), (int)getpid(), r);
}

/* Create name under a temporary name, lock it, write text, rename it into
 * place.  Returns the locked descriptor, or -1 with errno. */
static int publish_locked_file(const char *dir, const char *name, const char *text,
                               int (*before_rename)(void *data, int fd), void *data)
{
	char tmp[PATH_MAX], final[PATH_MAX];
	size_t len = strlen(text), off = 0;
	int fd, saved;

	snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s", dir, name);
	snprintf(final, sizeof final, "%s/%s", dir, name);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	/* Readable by every user whatever the umask (the queue's dispatcher
	 * runs under 077): a lease others cannot open they would take for
	 * dead, and give its GPUs away. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 || fchmod(fd, 0644) < 0)
		goto failed;
	if (before_rename && before_rename(data, fd) < 0)
		goto failed;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			goto failed;
		}
		off += (size_t)n;
	}
	if (rename(tmp, final) < 0)
		goto failed;
	return fd;
failed:
	saved = errno;
	unlink(tmp);
	close(fd);
	errno = saved;
	return -1;
}

/*
 * Why the state directory takes no more files, for the message: the file
 * system is full (its inodes, on a tmpfs, are everyone's), and who owns
 * most of the directory's files -- counted by owner, for at most a second
 * (a flood of a million files takes longer to count than to be told).
 */
#define FULL_COUNT_MS 1000

static void full_why(const struct registry *reg, int err_no, char *out, size_t len)
{
	struct {
		unsigned uid;
		size_t files;
	} top[8];
	size_t ntop = 0, total = 0, best = 0;
	int64_t stop_at = monotonic_ms() + FULL_COUNT_MS;
	struct statvfs vfs;
	struct dirent *de;
	char user[33];
	int partial = 0;
	DIR *d;

	snprintf(out, len, "%s", strerror(err_no));
	if (err_no != ENOSPC && err_no != EDQUOT)
		return;
	d = opendir(reg->dir);
	while (d && (de = readdir(d))) {
		struct stat st;
		size_t i;

		if ((total & 1023) == 0 && monotonic_ms() > stop_at) {
			partial = 1;
			break;
		}
		if (de->d_name[0] == '.' ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		total++;
		for (i = 0; i < ntop && top[i].uid != st.st_uid; i++)
			;
		if (i == ntop && ntop < ARRAY_SIZE(top)) {
			top[ntop].uid = st.st_uid;
			top[ntop++].files = 0;
		}
		if (i < ntop)
			top[i].files++;
	}
	if (d)
		closedir(d);
	for (size_t i = 1; i < ntop; i++)
		if (top[i].files > top[best].files)
			best = i;
	if (statvfs(reg->dir, &vfs) == 0 && vfs.f_files && !vfs.f_ffree)
		snprintf(out, len, "the file system of the state directory has no inodes left");
	else
		snprintf(out, len, "the file system of the state directory is full (%s)",
		         strerror(err_no));
	if (!ntop)
		return;
	registry_user_name(top[best].uid, user, sizeof user);
	snprintf(out + strlen(out), len - strlen(out),
	         "; user '%s' owns %zu of the %s%zu files in it: ask them or an admin to remove "
	         "them (find %s -user %s -delete)",
	         user, top[best].files, partial ? "first " : "", total, reg->dir, user);
}

static char *self_command(void)
{
	char buf[256];

	return strdup(proctree_command(0, buf, sizeof buf) > 0 ? buf : "?");
}

enum gm_err registry_write_ticket(struct registry *reg, struct attempt *a,
                                  const struct gm_request *req, const struct acquire_opts *opts,
                                  char *name, size_t name_len, int *fd_out, char *err, size_t len)
{
	struct waiter_info wi = {0};
	json_t *o = NULL;
	char id[64], *text = NULL, *cmd = NULL;
	size_t n = 0;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	random_id(id, sizeof id);
	/* Zero-padded nanoseconds: names sort in arrival order. */
	snprintf(name, name_len, WAIT_PREFIX "%020lld.%s",
	         (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, id);
	/* The one waiter record (record.h); the owner of the file, not its
	 * "uid", is what readers believe. */
	wi.cand = calloc(a->snap->gpu_count + 1, sizeof *wi.cand);
	for (size_t pos = 0; wi.cand && pos < a->snap->gpu_count; pos++)
		if (a->cand[pos])
			str_copy(wi.cand[n++], sizeof wi.cand[0], a->snap->gpus[pos].uuid);
	wi.cand_count = n;
	if (!opts || !opts->command)
		cmd = self_command();
	wi.uid = (unsigned)geteuid();
	wi.pid = getpid();
	wi.pid_start = proctree_start(wi.pid);
	str_copy(wi.command, sizeof wi.command,
	         opts && opts->command ? opts->command : (cmd ? cmd : "?"));
	wi.since_ms = now_ms();
	line_summary(req, wi.summary, sizeof wi.summary);
	/* What the rules place it by, for the waiters behind it (line.h). */
	wi.req = (struct gm_request *)req;
	if (a->env.usable)
		wi.usable = record_usable_json(a->env.usable, a->snap);
	if (a->env.mig_usable)
		wi.usable_migs = record_usable_migs_json(a->env.mig_usable, a->snap);
	if (getenv("GPUMAN_RESERVATION"))
		str_copy(wi.within, sizeof wi.within, getenv("GPUMAN_RESERVATION"));
	if (wi.cand && (o = record_waiter_json(&wi))) {
		json_object_set_new(o, "pidns", json_integer(registry_own_pidns()));
		text = json_dumps(o, JSON_COMPACT);
	}
	json_decref(o);
	json_decref(wi.usable);
	json_decref(wi.usable_migs);
	free(wi.cand);
	free(cmd);
	if (!text)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	*fd_out = publish_locked_file(reg->dir, name, text, NULL, NULL);
	free(text);
	if (*fd_out < 0) {
		char why[512];

		full_why(reg, errno, why, sizeof why);
		return gm_fail(GM_ERR_STATE, err, len, "cannot queue in '%s': %s", reg->dir, why);
	}
	return GM_OK;
}

struct spawn_call {
	const struct acquire_opts *opts;
	struct gm_lease *lease;
	pid_t job_pid;
	char *err;
	size_t len;
	json_t *doc;
};

/* Under the registry lock and before the lease file is visible, start the
 * job so that the lease names it from the first instant. */
static int lease_before_rename(void *data, int fd)
{
	struct spawn_call *sc = data;
	char *text;

	sc->lease->fd = fd;
	if (sc->opts && sc->opts->spawn &&
	    sc->opts->spawn(sc->opts->spawn_data, sc->lease, &sc->job_pid, sc->err, sc->len) < 0) {
		errno = ECHILD;
		return -1;
	}
	json_object_set_new(sc->doc, "job_pid", json_integer(sc->job_pid));
	sc->lease->rec.job_start = proctree_start(sc->job_pid);
	json_object_set_new(sc->doc, "job_start",
	                    json_integer((json_int_t)sc->lease->rec.job_start));
	text = json_dumps(sc->doc, JSON_COMPACT);
	if (!text) {
		errno = ENOMEM;
		return -1;
	}
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		free(text);
		return -1;
	}
	free(text);
	return 0;
}

enum gm_err registry_publish_lease(struct registry *reg, struct attempt *a,
                                   const struct gm_request *req, const struct acquire_opts *opts,
                                   struct gm_lease **out, char *err, size_t len)
{
	struct gm_lease *l = calloc(1, sizeof *l);
	struct lease_info *li = l ? &l->rec : NULL;
	json_t *doc = NULL;
	struct spawn_call sc = {opts, l, getpid(), err, len, NULL};
	size_t n = a->res.count, ilen = 1, mig_used = 0, mig_gpus = 0;
	char mig_list[64] = "";
	uint64_t min_total = 0;
	char name[128], *cmd = NULL;
	enum gm_err rc = GM_ERR_NOMEM;
	int fd;

	if (!l)
		goto failed;
	l->fd = -1;
	l->indices_text = calloc(n + 1, 12);
	l->cuda_visible = a->res.mig ? strdup(a->snap->migs[a->res.chosen[0]].uuid)
	                             : pick_env_cuda_visible(&a->env, a->snap, a->res.chosen, n);
	if (lease_gpus_alloc(l, n) < 0 || !l->indices_text || !l->cuda_visible)
		goto failed;
	random_id(li->id, sizeof li->id);
	li->exclusive = !req->share;
	for (size_t i = 0; i < n; i++) {
		const struct gm_mig *m = a->res.mig ? &a->snap->migs[a->res.chosen[i]] : NULL;
		const struct gm_gpu *g = m ? &a->snap->gpus[snapshot_position(a->snap, m->gpu)]
		                           : &a->snap->gpus[a->res.chosen[i]];
		uint64_t share = req->share ? size_mib(&req->mem, g->mem_total_mib) : 0;

		ilen += (size_t)sprintf(l->indices_text + ilen - 1, "%s%u", i ? "," : "", g->index);
		/* A percentage share is the same size on every GPU of the lease:
		 * the smallest GPU's, so the record is one number. */
		if (req->share && (!li->share_mib || share < li->share_mib))
			li->share_mib = share;
		if (!min_total || g->mem_total_mib < min_total)
			min_total = g->mem_total_mib;
		/* the file names a slice's GPU, and the slice beside it */
		li->indices[i] = g->index;
		str_copy(li->uuids[i], sizeof li->uuids[i], g->uuid);
		str_copy(li->migs[i], sizeof li->migs[i], m ? m->uuid : "");
	}
	l->mem_fraction = req->share && min_total ? (double)li->share_mib / (double)min_total : 0.0;
	/* Say why a GPU that looks idle was passed over. */
	for (size_t i = 0; i < a->snap->gpu_count && !req->mig[0]; i++) {
		const struct gm_gpu *g = &a->snap->gpus[i];

		if (!(g->valid & GM_HAS_MIG) || g->mig_mode != 1 ||
		    mig_used + 12 >= sizeof mig_list)
			continue;
		mig_used += (size_t)snprintf(mig_list + mig_used, sizeof mig_list - mig_used,
		                             "%s%u", mig_gpus ? "," : "", g->index);
		mig_gpus++;
		snprintf(l->note, sizeof l->note,
		         "GPU%s %s %s in MIG mode: never handed out whole (ask for a slice with "
		         "--mig PROFILE)",
		         mig_gpus > 1 ? "s" : "", mig_list, mig_gpus > 1 ? "are" : "is");
	}
	if (!opts || !opts->command)
		cmd = self_command();
	/* The one lease record (record.h); the owner of the file, not its
	 * "uid", is what readers believe. */
	li->uid = (unsigned)geteuid();
	registry_user_name(li->uid, li->user, sizeof li->user);
	li->pid = getpid();
	li->pid_start = proctree_start(li->pid);
	str_copy(li->command, sizeof li->command,
	         opts && opts->command ? opts->command : (cmd ? cmd : "?"));
	li->start_ms = now_ms();
	li->reservation = opts && opts->reserve_ms > 0;
	li->expires_ms = li->reservation ? li->start_ms + opts->reserve_ms : 0;
	doc = record_lease_json(li);
	if (!doc)
		goto failed;
	json_object_set_new(doc, "pidns", json_integer(registry_own_pidns()));
	json_object_set_new(doc, "pid_start", json_integer((json_int_t)li->pid_start));
	sc.doc = doc;
	snprintf(name, sizeof name, "%s%s",
	         opts && opts->reserve_ms > 0 ? RESV_PREFIX : LEASE_PREFIX, li->id);
	if (snprintf(l->path, sizeof l->path, "%s/%s", reg->dir, name) >= (int)sizeof l->path) {
		rc = gm_fail(GM_ERR_STATE, err, len, "state directory path '%s' is too long",
		             reg->dir);
		goto failed;
	}
	err[0] = '\0';
	fd = publish_locked_file(reg->dir, name, "", lease_before_rename, &sc);
	if (fd < 0) {
		char why[512];

		if (!err[0])
			full_why(reg, errno, why, sizeof why);
		rc = err[0] ? GM_ERR_IO
		            : gm_fail(GM_ERR_STATE, err, len, "cannot write a lease in '%s': %s",
		                      reg->dir, why);
		goto failed;
	}
	l->fd = fd;
	li->job_pid = sc.job_pid;
	json_decref(doc);
	free(cmd);
	*out = l;
	return GM_OK;
failed:
	json_decref(doc);
	free(cmd);
	lease_free(l);
	if (rc == GM_ERR_NOMEM)
		gm_fail(rc, err, len, "out of memory");
	return rc;
}
