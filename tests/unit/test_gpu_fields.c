/*
 * test_gpu_fields.c - the GPU field table (lib/gpu_fields.c) walked row by
 * row: every output's name is given or said to be none, no two rows share
 * a name in any output, each row has a place of its own in struct gm_gpu,
 * and the JSON shows exactly the rows with a JSON key.  A row added with a
 * name left out, a name taken twice, or a member copied from the row above
 * fails here before any output shows it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include "unit.h"
#include "gpu_fields.h"
#include "snapshot.h"

/* The name of output `what` of row i, as the table gives it. */
static const char *name_of(size_t i, int what)
{
	const struct gpu_field *f = &gpu_fields[i];
	const char *names[] = {f->json, f->csv, f->smi, f->smi_alias, f->metric, f->label};

	return names[what];
}
static const char *const outputs[] = {"json", "csv", "smi", "smi_alias", "metric", "label"};

static void every_row_says_each_name_or_none(void **state)
{
	(void)state;
	assert_true(gpu_field_count > 0 && gpu_field_count <= GPU_FIELD_MAX);
	for (size_t i = 0; i < gpu_field_count; i++) {
		const struct gpu_field *f = &gpu_fields[i];

		/* rows are in enum gm_gpu_value order: gm_gpu_value() indexes them */
		assert_int_equal(f->id, i);
		for (size_t w = 0; w < sizeof outputs / sizeof outputs[0]; w++)
			if (!name_of(i, (int)w)) {
				print_error("row %zu leaves out its %s name: give one or GF_NONE\n",
				            i, outputs[w]);
				fail();
			}
		assert_non_null(f->unit);
		assert_non_null(f->shown_unit);
		assert_non_null(f->smi_unit);
		assert_non_null(f->help);
		assert_true(gpu_field_named(f->nvml));
		assert_true(f->need != 0);
		assert_true(f->scale >= 1);
		/* a metric says what it is; nvidia-smi's names go with a CSV
		 * column, which --query-gpu picks */
		assert_int_equal(gpu_field_named(f->metric), gpu_field_named(f->help));
		if (gpu_field_named(f->smi) || gpu_field_named(f->smi_alias) ||
		    gpu_field_named(f->smi_unit))
			assert_true(gpu_field_named(f->csv) && gpu_field_named(f->smi));
		/* the table's own NVML read: one unsigned, and words for a note */
		if (f->read == GF_READ_DEV_UINT) {
			assert_int_equal(f->type, GF_UNSIGNED);
			assert_true(gpu_field_named(f->label));
		}
	}
}

static void no_name_is_taken_twice(void **state)
{
	(void)state;
	/* smi and smi_alias share one namespace: --query-gpu takes either */
	for (size_t i = 0; i < gpu_field_count; i++)
		for (size_t w = 0; w < sizeof outputs / sizeof outputs[0]; w++) {
			const char *a = name_of(i, (int)w);
			int smi_w = w == 2 || w == 3;

			if (!gpu_field_named(a))
				continue;
			for (size_t k = 0; k < gpu_field_count; k++)
				for (size_t v = 0; v < sizeof outputs / sizeof outputs[0]; v++) {
					const char *b = name_of(k, (int)v);
					int same_space = v == w || (smi_w && (v == 2 || v == 3));

					if ((k == i && v == w) || !same_space ||
					    !gpu_field_named(b))
						continue;
					if (!strcasecmp(a, b)) {
						print_error("'%s' names rows %zu and %zu (%s)\n", a,
						            i, k, outputs[w]);
						fail();
					}
				}
		}
}

/* Names each output takes: Prometheus's [a-zA-Z_:][a-zA-Z0-9_:]*, and the
 * CSV's and JSON's lowercase words joined by _. */
static void names_are_well_formed(void **state)
{
	(void)state;
	for (size_t i = 0; i < gpu_field_count; i++) {
		const struct gpu_field *f = &gpu_fields[i];

		if (gpu_field_named(f->metric)) {
			assert_int_equal(strspn(f->metric,
			                        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
			                        "OPQRSTUVWXYZ_:0123456789"),
			                 strlen(f->metric));
			assert_true(f->metric[0] < '0' || f->metric[0] > '9');
		}
		if (gpu_field_named(f->json))
			assert_int_equal(strspn(f->json, "abcdefghijklmnopqrstuvwxyz_0123456789"),
			                 strlen(f->json));
		if (gpu_field_named(f->csv))
			assert_int_equal(strspn(f->csv, "abcdefghijklmnopqrstuvwxyz_0123456789"),
			                 strlen(f->csv));
	}
}

/* Each row has a place of its own: writing every row a distinct value,
 * each reads back its own (a member copied from the row above does not). */
static void each_row_has_its_own_place(void **state)
{
	struct gm_gpu g;

	(void)state;
	memset(&g, 0, sizeof g);
	for (size_t i = 0; i < gpu_field_count; i++) {
		assert_true(gpu_fields[i].offset < sizeof g);
		gpu_field_set(&g, &gpu_fields[i], (int64_t)(100 + i));
		g.valid |= gpu_fields[i].need;
	}
	for (size_t i = 0; i < gpu_field_count; i++) {
		int64_t v = -1;

		assert_true(gpu_field_get(&g, &gpu_fields[i], &v));
		if (v != (int64_t)(100 + i)) {
			print_error("row %zu reads %lld: another row writes its place\n", i,
			            (long long)v);
			fail();
		}
		/* the public accessor is the table's */
		assert_true(gm_gpu_value(&g, gpu_fields[i].id, &v));
		assert_int_equal(v, 100 + i);
	}
	/* a bit clear: not reported, whatever the member holds */
	for (size_t i = 0; i < gpu_field_count; i++) {
		struct gm_gpu h = g;
		int64_t v;

		h.valid &= ~gpu_fields[i].need;
		assert_false(gpu_field_get(&h, &gpu_fields[i], &v));
	}
}

/* The keys a GPU's JSON has besides the table's (snapshot_gpu_json). */
static const char *const own_keys[] = {
    "index",
    "uuid",
    "name",
    "pci_bus_id",
    "state",
    "note",
    "compute_capability",
    "compute_mode",
    "mig_mode",
    "persistence_mode",
    "mig_devices",
    "cuda_index",
    "cuda_index_pci_bus_order",
};

/* The JSON has each row's key with its value as people read it (value /
 * scale), null where unreported, and no row takes one of its other keys. */
static void json_shows_each_row_with_a_key(void **state)
{
	struct gm_snapshot snap;
	struct gm_gpu *g;
	size_t keyed = 0, own = sizeof own_keys / sizeof own_keys[0];
	json_t *o;
	char text[32];

	(void)state;
	fake_snapshot_init(&snap);
	g = fake_gpu(&snap, 0, "GPU-8f3a0000-1111-2222-3333-444455556666", 24576, 20000, 30, 61000,
	             280000, 100);
	for (size_t i = 0; i < gpu_field_count; i++) {
		gpu_field_set(g, &gpu_fields[i], (int64_t)(1000 * (i + 1)));
		g->valid |= gpu_fields[i].need;
	}
	o = snapshot_gpu_json(&snap, 0);
	for (size_t i = 0; i < gpu_field_count; i++) {
		const struct gpu_field *f = &gpu_fields[i];
		json_t *v;

		if (!gpu_field_named(f->json))
			continue;
		keyed++;
		for (size_t k = 0; k < own; k++)
			if (!strcmp(f->json, own_keys[k])) {
				print_error("row %zu's key '%s' is the JSON's own\n", i, f->json);
				fail();
			}
		v = json_object_get(o, f->json);
		if (!json_is_number(v)) {
			print_error("the JSON has no number under '%s'\n", f->json);
			fail();
		}
		assert_true(json_number_value(v) == (double)(1000 * (i + 1)) / f->scale);
		/* the CSV's text is the JSON's number */
		assert_non_null(gpu_field_text(g, f, text, sizeof text));
		assert_true(strtod(text, NULL) == json_number_value(v));
	}
	/* own_keys is the whole rest: a key the JSON gains is checked too */
	for (size_t k = 0; k < own; k++)
		assert_non_null(json_object_get(o, own_keys[k]));
	assert_int_equal(json_object_size(o), own + keyed);
	json_decref(o);
	g->valid = 0;
	o = snapshot_gpu_json(&snap, 0);
	for (size_t i = 0; i < gpu_field_count; i++)
		if (gpu_field_named(gpu_fields[i].json)) {
			assert_true(json_is_null(json_object_get(o, gpu_fields[i].json)));
			assert_null(gpu_field_text(g, &gpu_fields[i], text, sizeof text));
		}
	json_decref(o);
	fake_snapshot_release(&snap);
}

/* Where NVML gives it: a function NVML 13.3's nvml.h declares. */
static void nvml_functions_exist(void **state)
{
	FILE *f = fopen("sim/nvml-functions.txt", "r");
	char line[128], all[65536] = "\n";
	size_t used = 1;

	(void)state;
	assert_non_null(f);
	while (fgets(line, sizeof line, f) && used + strlen(line) < sizeof all) {
		strcpy(all + used, line);
		used += strlen(line);
	}
	fclose(f);
	for (size_t i = 0; i < gpu_field_count; i++) {
		char want[128];

		/* "A x B(arg)": a reading made of two calls */
		if (strchr(gpu_fields[i].nvml, ' '))
			continue;
		snprintf(want, sizeof want, "\n%s\n", gpu_fields[i].nvml);
		if (!strstr(all, want)) {
			print_error("row %zu: NVML has no %s\n", i, gpu_fields[i].nvml);
			fail();
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(every_row_says_each_name_or_none),
	    cmocka_unit_test(no_name_is_taken_twice),
	    cmocka_unit_test(names_are_well_formed),
	    cmocka_unit_test(each_row_has_its_own_place),
	    cmocka_unit_test(json_shows_each_row_with_a_key),
	    cmocka_unit_test(nvml_functions_exist),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
