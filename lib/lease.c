/*
 * lease.c - a gm_lease in this process (lease.h): freeing it and what the
 * gm_lease_*() accessors of gpuman.h answer, whichever transport granted it.
 */
#include <stdlib.h>
#include <unistd.h>
#include "lease.h"
#include "record.h"

void lease_free(struct gm_lease *l)
{
	if (!l)
		return;
	record_lease_release(&l->rec);
	free(l->cuda_visible);
	free(l->indices_text);
	free(l->broker);
	free(l);
}

void lease_detach(struct gm_lease *lease)
{
	if (!lease)
		return;
	if (lease->fd >= 0)
		close(lease->fd);
	lease_free(lease);
}

int lease_gpus_alloc(struct gm_lease *l, size_t n)
{
	l->rec.gpu_count = n;
	l->rec.indices = calloc(n + 1, sizeof *l->rec.indices);
	l->rec.uuids = calloc(n + 1, sizeof *l->rec.uuids);
	l->rec.migs = calloc(n + 1, sizeof *l->rec.migs);
	return l->rec.indices && l->rec.uuids && l->rec.migs ? 0 : -1;
}

GM_API const char *gm_lease_id(const struct gm_lease *l)
{
	return l->rec.id;
}
GM_API size_t gm_lease_gpu_count(const struct gm_lease *l)
{
	return l->rec.gpu_count;
}
GM_API unsigned gm_lease_gpu_index(const struct gm_lease *l, size_t i)
{
	return i < l->rec.gpu_count ? l->rec.indices[i] : 0;
}
GM_API const char *gm_lease_gpu_uuid(const struct gm_lease *l, size_t i)
{
	/* a slice's holder knows it by the slice's UUID, as CUDA does */
	if (i >= l->rec.gpu_count)
		return "";
	return l->rec.migs[i][0] ? l->rec.migs[i] : l->rec.uuids[i];
}
GM_API const char *gm_lease_cuda_visible(const struct gm_lease *l)
{
	return l->cuda_visible;
}
GM_API const char *gm_lease_indices(const struct gm_lease *l)
{
	return l->indices_text;
}
GM_API double gm_lease_mem_fraction(const struct gm_lease *l)
{
	return l->mem_fraction;
}
GM_API int gm_lease_fd(const struct gm_lease *l)
{
	return l->fd;
}
