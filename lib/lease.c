/*
 * lease.c - a gm_lease in this process (lease.h): freeing it and what the
 * gm_lease_*() accessors of gpuman.h answer, whichever transport granted it.
 */
#include <stdlib.h>
#include <unistd.h>
#include "lease.h"

void lease_free(struct gm_lease *l)
{
	if (!l)
		return;
	free(l->indices);
	free(l->uuids);
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

GM_API const char *gm_lease_id(const struct gm_lease *l)
{
	return l->id;
}
GM_API size_t gm_lease_gpu_count(const struct gm_lease *l)
{
	return l->gpu_count;
}
GM_API unsigned gm_lease_gpu_index(const struct gm_lease *l, size_t i)
{
	return i < l->gpu_count ? l->indices[i] : 0;
}
GM_API const char *gm_lease_gpu_uuid(const struct gm_lease *l, size_t i)
{
	return i < l->gpu_count ? l->uuids[i] : "";
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
