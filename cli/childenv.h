/*
 * childenv.h - the environment a job is started with, as an owned list:
 * set in the parent, handed whole to the child at exec, so that nothing is
 * ever set in gpuman's own environment (git's child_process.env).  Shared
 * by `gpuman run` and the batch/queue runner.
 */
#ifndef GM_CHILDENV_H
#define GM_CHILDENV_H

#include <stddef.h>

struct child_env {
	char **vars;    /* "NAME=VALUE", NULL-terminated; owned */
	size_t count;
};
#define CHILD_ENV_INIT { NULL, 0 }

/* Start from a copy of environ.  Returns 0, -1 out of memory. */
int child_env_init(struct child_env *env);
/* Start from a block of NUL-separated NAME=VALUE strings (len bytes). */
int child_env_init_block(struct child_env *env, const char *block, size_t len);
/* Set NAME=VALUE; an existing NAME is replaced only if overwrite.
 * Returns 0, -1 out of memory. */
int child_env_set(struct child_env *env, const char *name, const char *value, int overwrite);
void child_env_release(struct child_env *env);

/* Tell frameworks that grab every GPU's memory to stay within a memory
 * share of this fraction of the GPU; values already set win. */
int child_env_framework(struct child_env *env, double fraction);

#endif
