/*
 * queue.c - the queue directory (queue.h): where it is, making it private,
 * peeking at it, waking and starting its dispatchers, pruning, and the
 * machine a job belongs to.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "queue.h"
#include "util.h"

static int make_private_dir(const char *dir, char *err, size_t len)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(err, len, "cannot create '%s': %s", dir, strerror(errno));
		return -1;
	}
	if (lstat(dir, &st) < 0) {
		snprintf(err, len, "'%s': %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, len, "'%s' is not a directory (GPUMAN_QUEUE_DIR)", dir);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, len,
		         "'%s' belongs to another user; the queue must be yours alone "
		         "(set GPUMAN_QUEUE_DIR)",
		         dir);
		return -1;
	}
	if ((st.st_mode & 077) && chmod(dir, 0700) < 0) {
		snprintf(err, len, "cannot make '%s' private: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* mkdir -p for the parents of the queue directory (0700 too). */
static int make_parents(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST) {
			*p = '/';
			return -1;
		}
		*p = '/';
	}
	return 0;
}

/* The queue directory's path (queue.h); -1 when there is no home for it. */
static int queue_dir(char *buf, size_t len)
{
	const char *env = getenv("GPUMAN_QUEUE_DIR"), *xdg = getenv("XDG_STATE_HOME"),
	           *home = getenv("HOME");

	if (env && *env)
		snprintf(buf, len, "%s", env);
	else if (xdg && *xdg == '/')
		snprintf(buf, len, "%s/gpuman", xdg);
	else if (home && *home == '/')
		snprintf(buf, len, "%s/.local/state/gpuman", home);
	else
		return -1;
	return 0;
}

int queue_peek(size_t *counts, struct job **next, size_t *nnext, size_t max, char *err, size_t len)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	struct jobstore *st = NULL;
	struct stat sb;
	int rc = -1;

	memset(counts, 0, JOB_STATE_COUNT * sizeof *counts);
	*next = NULL;
	*nnext = 0;
	if (queue_dir(dir, sizeof dir) < 0)
		return 0; /* no home, so no queue */
	snprintf(path, sizeof path, "%s/jobs.db", dir);
	if (lstat(dir, &sb) < 0 || lstat(path, &sb) < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		snprintf(err, len, "'%s': %s", path, strerror(errno));
		return -1;
	}
	/* Only a store of our own, as queue_open insists. */
	if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
		snprintf(err, len, "'%s' is not a job store of yours", path);
		return -1;
	}
	if (jobstore_open(&st, path, err, len) != GM_OK ||
	    jobstore_counts(st, counts, err, len) != GM_OK ||
	    (max && jobstore_list(st, JOB_QUEUED, 0, max, next, nnext, err, len) != GM_OK))
		goto done;
	rc = 0;
done:
	jobstore_close(st);
	return rc;
}

/* prefix + err, in place. */
static void prefix(char *err, size_t len, const char *pre)
{
	char msg[GM_ERRBUF_SIZE];

	snprintf(msg, sizeof msg, "%s", err);
	snprintf(err, len, "%s%s", pre, msg);
}

int queue_open(struct queue *q, char *err, size_t len)
{
	char path[PATH_MAX + 32];

	memset(q, 0, sizeof *q);
	err[0] = '\0';
	if (queue_dir(q->dir, sizeof q->dir) < 0) {
		snprintf(err, len, "no home directory for the queue: set GPUMAN_QUEUE_DIR");
		return -1;
	}
	if (make_parents(q->dir) < 0 || make_private_dir(q->dir, err, len) < 0) {
		if (errno && !err[0])
			snprintf(err, len, "queue directory: %s", strerror(errno));
		else
			prefix(err, len, "queue directory: ");
		return -1;
	}
	if (make_private_dir(queue_path(q, "logs", path, sizeof path), err, len) < 0 ||
	    make_private_dir(queue_path(q, "runs", path, sizeof path), err, len) < 0) {
		prefix(err, len, "queue directory: ");
		return -1;
	}
	if (jobstore_open(&q->store, queue_path(q, "jobs.db", path, sizeof path), err, len) !=
	    GM_OK)
		return -1;
	return 0;
}

void queue_close(struct queue *q)
{
	jobstore_close(q->store);
	q->store = NULL;
}

char *queue_path(const struct queue *q, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", q->dir, name);
	return buf;
}

char *queue_log_path(const struct queue *q, const struct job *job, char *buf, size_t len)
{
	if (job->log)
		snprintf(buf, len, "%s", job->log);
	else
		snprintf(buf, len, "%s/logs/%lld.log", q->dir, (long long)job->id);
	return buf;
}

void queue_wake(const struct queue *q)
{
	char path[PATH_MAX + 32];

	touch_watched(queue_path(q, "wake", path, sizeof path));
}

struct pruned {
	const struct queue *q;
	int64_t *ids;
	char **logs;
	size_t n, cap;
	int nomem;
};

static void note_pruned(void *data, int64_t id, const char *log)
{
	struct pruned *p = data;

	if (p->n == p->cap) {
		size_t ncap = p->cap ? p->cap * 2 : 64;
		int64_t *ids = realloc(p->ids, ncap * sizeof *ids);
		char **logs = ids ? realloc(p->logs, ncap * sizeof *logs) : NULL;

		if (ids)
			p->ids = ids;
		if (!logs) {
			p->nomem = 1; /* the rows go; a log file may stay behind */
			return;
		}
		p->logs = logs;
		p->cap = ncap;
	}
	p->ids[p->n] = id;
	p->logs[p->n++] = log ? strdup(log) : NULL;
}

int queue_prune(struct queue *q, int64_t ended_before_ms, size_t *count, char *err, size_t len)
{
	struct pruned p = {q, NULL, NULL, 0, 0, 0};
	enum gm_err rc =
	    jobstore_prune(q->store, ended_before_ms, note_pruned, &p, count, err, len);

	/* Logs only once the rows are gone for good: a failed prune keeps
	 * both. */
	for (size_t i = 0; i < p.n; i++) {
		struct job j = JOB_INIT;
		char path[PATH_MAX + 64];

		j.id = p.ids[i];
		j.log = p.logs[i];
		if (rc == GM_OK) {
			unlink(queue_log_path(q, &j, path, sizeof path));
			snprintf(path, sizeof path, "%s/logs/%lld.json", q->dir, (long long)j.id);
			unlink(path);
		}
		free(p.logs[i]);
	}
	free(p.ids);
	free(p.logs);
	return rc == GM_OK ? 0 : -1;
}

int queue_drain_events(int ifd)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t got;
	int news = 0;

	while ((got = read(ifd, buf, sizeof buf)) > 0)
		for (char *p = buf; p < buf + got;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			if ((ev->mask & IN_Q_OVERFLOW) || !ev->len ||
			    strncmp(ev->name, "dispatcher", 10) ||
			    strcmp(ev->name + strlen(ev->name) - 5, ".lock"))
				news = 1;
			p += sizeof *ev + ev->len;
		}
	return news;
}

int queue_has_work(struct queue *q)
{
	int live = 1;

	if (jobstore_has_live(q->store, &live, NULL, 0) != GM_OK)
		return 1;
	return live;
}

int queue_ensure_dispatcher(const struct queue *q, char *err, size_t len)
{
	char **machines = NULL;
	size_t n = 0;
	int rc = 0;

	if (jobstore_live_machines(q->store, &machines, &n, err, len) != GM_OK)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!rc && queue_ensure_machine(q, machines[i], err, len) < 0)
			rc = -1;
		free(machines[i]);
	}
	free(machines);
	return rc;
}

int queue_ensure_machine(const struct queue *q, const char *machine, char *err, size_t len)
{
	char path[PATH_MAX + 32], arg[32], lock[64];
	pid_t pid;
	int fd, status;

	fd = open(queue_path(q, queue_lock_name(machine, lock, sizeof lock), path, sizeof path),
	          O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(err, len, "'%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int saved = errno;

		close(fd);
		if (saved == EWOULDBLOCK)
			return 0; /* one runs, and will see what we committed */
		snprintf(err, len, "'%s': %s", path, strerror(saved));
		return -1;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		snprintf(err, len, "fork: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (pid == 0) {
		int null_fd, log_fd;

		/* Its own session, and not our child: it outlives us and no
		 * terminal's signals reach it. */
		setsid();
		if (fork() != 0)
			_exit(0);
		if (fd < 3) {
			int high = fcntl(fd, F_DUPFD, 3);

			if (high < 0)
				_exit(1);
			fd = high;
		}
		fcntl(fd, F_SETFD, 0);
		null_fd = open("/dev/null", O_RDWR);
		log_fd = open(queue_path(q, "dispatcher.log", path, sizeof path),
		              O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
		if (null_fd >= 0)
			dup2(null_fd, 0);
		dup2(log_fd >= 0 ? log_fd : null_fd, 1);
		dup2(log_fd >= 0 ? log_fd : null_fd, 2);
		if (null_fd > 2)
			close(null_fd);
		if (log_fd > 2)
			close(log_fd);
		umask(077);
		/* Its machine's environment, whoever starts it. */
		if (queue_machine_apply(machine) < 0 ||
		    setenv("GPUMAN_DISPATCHER_MACHINE", machine, 1) < 0)
			_exit(1);
		snprintf(arg, sizeof arg, "--lock-fd=%d", fd);
		execl("/proc/self/exe", "gpuman", "dispatcher", arg, q->dir, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	close(fd); /* the dispatcher holds the lock through its own copy */
	return 0;
}

/* ---- the machine a job belongs to ----------------------------------------- */

/* The variables that decide which GPUs and which registry a job gets: the
 * GPUs (NVML library or simulated scenario and its state), the lease
 * registry or broker, the admin's limits and the reservation it is made
 * inside.  Paths (all but the last) are made absolute. */
static const char *const machine_vars[] = {
    "GPUMAN_NVML",   "GPUMAN_SIM",    "GPUMAN_SIM_STATE",   "GPUMAN_STATE_DIR",
    "GPUMAN_BROKER", "GPUMAN_CONFIG", "GPUMAN_RESERVATION",
};
#define NVARS (sizeof machine_vars / sizeof machine_vars[0])

/* value as an absolute path (it need not exist) into buf. */
static void absolute(const char *value, char *buf, size_t len)
{
	char cwd[PATH_MAX];

	if (realpath(value, buf))
		return;
	if (value[0] == '/' || !getcwd(cwd, sizeof cwd))
		snprintf(buf, len, "%s", value);
	else
		snprintf(buf, len, "%.*s/%s", (int)(len / 2), cwd, value);
}

char *queue_machine_key(void)
{
	size_t used = 0, cap = 64;
	char *key = malloc(cap);

	if (!key)
		return NULL;
	key[0] = '\0';
	for (size_t i = 0; i < NVARS; i++) {
		const char *v = getenv(machine_vars[i]);
		char path[PATH_MAX];
		size_t need;

		if (!v || !*v || strchr(v, '\n'))
			continue;
		if (strcmp(machine_vars[i], "GPUMAN_RESERVATION") &&
		    (strcmp(machine_vars[i], "GPUMAN_BROKER") || strcasecmp(v, "off")))
			absolute(v, path, sizeof path);
		else
			snprintf(path, sizeof path, "%s", v);
		need = used + strlen(machine_vars[i]) + strlen(path) + 3;
		if (need > cap) {
			char *grown = realloc(key, cap = need * 2);

			if (!grown) {
				free(key);
				return NULL;
			}
			key = grown;
		}
		used += (size_t)snprintf(key + used, cap - used, "%s=%s\n", machine_vars[i], path);
	}
	return key;
}

int queue_machine_apply(const char *key)
{
	for (size_t i = 0; i < NVARS; i++)
		unsetenv(machine_vars[i]);
	for (const char *p = key; p && *p;) {
		const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
		char name[64], value[PATH_MAX];

		if (!nl || !eq || eq > nl || (size_t)(eq - p) >= sizeof name ||
		    (size_t)(nl - eq) > sizeof value)
			return -1;
		snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
		snprintf(value, sizeof value, "%.*s", (int)(nl - eq - 1), eq + 1);
		if (setenv(name, value, 1) < 0)
			return -1;
		p = nl + 1;
	}
	return 0;
}

/* "<name><-hash of machine>" ("" the default machine: the bare name). */
static char *machine_name(const char *name, const char *ext, const char *machine, char *buf,
                          size_t len)
{
	uint64_t h = 14695981039346656037ULL; /* FNV-1a */

	if (!machine || !*machine) {
		snprintf(buf, len, "%s%s", name, ext);
		return buf;
	}
	for (const unsigned char *p = (const unsigned char *)machine; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	snprintf(buf, len, "%s-%016llx%s", name, (unsigned long long)h, ext);
	return buf;
}

char *queue_run_dir(const struct queue *q, const char *machine, char *buf, size_t len)
{
	char name[64];

	return queue_path(q, machine_name("runs", "", machine, name, sizeof name), buf, len);
}

char *queue_lock_name(const char *machine, char *buf, size_t len)
{
	return machine_name("dispatcher", ".lock", machine, buf, len);
}
