/*
 * childenv.c - a job's environment as an owned list (see protocol.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "protocol.h"

extern char **environ;

int child_env_set(struct child_env *env, const char *name, const char *value, int overwrite)
{
	size_t nlen = strlen(name);
	char *entry, **grown;

	for (size_t i = 0; i < env->count; i++)
		if (!strncmp(env->vars[i], name, nlen) && env->vars[i][nlen] == '=') {
			if (!overwrite)
				return 0;
			if (asprintf(&entry, "%s=%s", name, value) < 0)
				return -1;
			free(env->vars[i]);
			env->vars[i] = entry;
			return 0;
		}
	grown = realloc(env->vars, (env->count + 2) * sizeof *grown);
	if (!grown)
		return -1;
	env->vars = grown;
	if (asprintf(&env->vars[env->count], "%s=%s", name, value) < 0)
		return -1;
	env->vars[++env->count] = NULL;
	return 0;
}

int child_env_init(struct child_env *env)
{
	size_t n = 0;

	while (environ[n])
		n++;
	env->vars = calloc(n + 1, sizeof *env->vars);
	if (!env->vars)
		return -1;
	for (env->count = 0; env->count < n; env->count++)
		if (!(env->vars[env->count] = strdup(environ[env->count])))
			return -1;
	return 0;
}

int child_env_init_block(struct child_env *env, const char *block, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += block[i] == '\0';
	env->count = 0;
	env->vars = calloc(n + 2, sizeof *env->vars);
	if (!env->vars)
		return -1;
	for (size_t i = 0; i < len;) {
		size_t l = strnlen(block + i, len - i);

		if (l && memchr(block + i, '=', l)) {
			env->vars[env->count] = strndup(block + i, l);
			if (!env->vars[env->count])
				return -1;
			env->count++;
		}
		i += l + 1;
	}
	return 0;
}

void child_env_release(struct child_env *env)
{
	for (size_t i = 0; i < env->count; i++)
		free(env->vars[i]);
	free(env->vars);
	env->vars = NULL;
	env->count = 0;
}

int child_env_framework(struct child_env *env, double fraction)
{
	char frac[32];

	snprintf(frac, sizeof frac, "%.3f", fraction > 0.001 ? fraction : 0.001);
	return child_env_set(env, "TF_FORCE_GPU_ALLOW_GROWTH", "true", 0) |
	       child_env_set(env, "XLA_PYTHON_CLIENT_PREALLOCATE", "false", 0) |
	       child_env_set(env, "XLA_CLIENT_MEM_FRACTION", frac, 0) |
	       child_env_set(env, "XLA_PYTHON_CLIENT_MEM_FRACTION", frac, 0);
}
