/*
 * lease.c - the broker's list of leases: a lease added or ended (the user's
 * counts, the state file, the fence), the pidfd that watches its holder,
 * and its record as JSON.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "daemon.h"

json_t *daemon_lease_json(const struct blease *l, int secret)
{
	/* The one lease record (record.h), shared, not copied; a lease whose
	 * job was not named shows its asker there, as a lease file does. */
	struct lease_info li = l->rec;
	json_t *o;

	if (!li.job_pid)
		li.job_pid = li.pid;
	o = record_lease_json(&li);
	if (o && secret) {
		json_object_set_new(o, "token", json_string(l->token));
		json_object_set_new(o, "pid_start", json_integer((json_int_t)l->rec.pid_start));
		json_object_set_new(o, "job_start", json_integer((json_int_t)l->rec.job_start));
	}
	return o;
}

void daemon_lease_free(struct blease *l)
{
	free(l->record);
	record_lease_release(&l->rec);
	free(l);
}

void daemon_lease_watch(struct daemon *d, struct blease *l, int pidfd)
{
	struct epoll_event ev = {EPOLLIN, {.ptr = l}};

	if (l->pidfd >= 0 && l->pidfd != pidfd) {
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, l->pidfd, NULL);
		close(l->pidfd);
	}
	l->pidfd = pidfd;
	epoll_ctl(d->epfd, EPOLL_CTL_ADD, l->pidfd, &ev);
}

void daemon_lease_end(struct daemon *d, struct blease *l)
{
	daemon_fence_end(d, l); /* nothing of its job outlives it */
	if (l->prev)
		l->prev->next = l->next;
	else
		d->leases = l->next;
	if (l->next)
		l->next->prev = l->prev;
	if (l->pidfd >= 0) {
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, l->pidfd, NULL);
		close(l->pidfd);
		l->pidfd = -1;
	}
	if (l->conn)
		l->conn->lease = NULL;
	daemon_hours_charge(d, l);
	{
		struct user_slot *u = daemon_user(d, l->rec.uid);

		if (u) {
			u->gpus -= (unsigned)l->rec.gpu_count;
			u->reservations -= l->rec.reservation ? 1 : 0;
		}
	}
	d->reservation_count -= l->rec.reservation ? 1 : 0;
	d->gen++;
	d->lease_count--;
	d->dirty = 1;
	daemon_state_lease_end(d, l);
	l->ended = 1;
	l->grave = d->ended_leases;
	d->ended_leases = l;
}

void daemon_lease_add(struct daemon *d, struct blease *l)
{
	l->prev = NULL;
	l->next = d->leases;
	if (d->leases)
		d->leases->prev = l;
	d->leases = l;
	d->lease_count++;
	daemon_state_lease(d, l);
	{
		struct user_slot *u = daemon_user(d, l->rec.uid);

		if (u) {
			u->gpus += (unsigned)l->rec.gpu_count;
			u->reservations += l->rec.reservation ? 1 : 0;
		}
	}
	d->reservation_count += l->rec.reservation ? 1 : 0;
	d->gen++;
	daemon_fence_sessions(d, l->rec.uid, NULL); /* her sessions may open it now */
}
