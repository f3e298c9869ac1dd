/* The C ABI from plain C (C99) over the simulator: every entry point, success and failure paths.
 * Exits non-zero with the failing line on the first broken expectation. */
#include <ncclpool/ncclpool.h>

#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

static int checks = 0;
#define EXPECT(cond)                                                                            \
  do {                                                                                          \
    ++checks;                                                                                   \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond,       \
              ncclpool_last_error());                                                           \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)
#define OK(call) EXPECT((call) == NCCLPOOL_SUCCESS)

static ncclpool_pool_t make_sim_pool(const char* name, ncclpool_registration_t kind) {
  ncclpool_pool_options_t options;
  ncclpool_pool_options_t resolved;
  ncclpool_pool_t pool = NULL;
  ncclpool_pool_options_init(&options);
  options.name = name;
  options.source = NCCLPOOL_SOURCE_SIM;
  options.default_registration = kind;
  options.growth_chunk = 4u << 20;
  OK(ncclpool_pool_create(&options, &pool));
  OK(ncclpool_pool_get_options(pool, &resolved));
  EXPECT(resolved.source == NCCLPOOL_SOURCE_SIM);
  EXPECT(resolved.alignment == 512);
  EXPECT(resolved.deterministic == (kind != NCCLPOOL_REGISTRATION_LOCAL));
  EXPECT(strcmp(resolved.name, name) == 0);
  return pool;
}

static void test_status_and_version(void) {
  ncclpool_features_t features;
  EXPECT(strcmp(ncclpool_status_string(NCCLPOOL_SUCCESS), "success") == 0);
  EXPECT(strcmp(ncclpool_status_string(NCCLPOOL_ERROR_OUT_OF_MEMORY), "out_of_memory") == 0);
  EXPECT(strcmp(ncclpool_status_string(NCCLPOOL_ERROR_AGREEMENT), "agreement_error") == 0);
  EXPECT(strcmp(ncclpool_status_string((ncclpool_status_t)99), "unknown_status") == 0);
  EXPECT(ncclpool_version() == NCCLPOOL_VERSION_MAJOR * 10000 + NCCLPOOL_VERSION_MINOR * 100 + NCCLPOOL_VERSION_PATCH);
  EXPECT(strlen(ncclpool_version_string()) >= 5);
  memset(&features, 0, sizeof features);
  EXPECT(ncclpool_get_features(&features) == NCCLPOOL_ERROR_INVALID_ARGUMENT); /* struct_size unset */
  EXPECT(strstr(ncclpool_last_error(), "struct_size") != NULL);
  features.struct_size = sizeof features;
  OK(ncclpool_get_features(&features));
  EXPECT(features.cuda_available || features.why_not[0] != '\0');
  /* No window was registered in this process: the symmetric kernels' CTA count is not decided yet. */
  EXPECT(features.symmetric_ctas_decided == 0 && features.symmetric_ctas == 0);
  EXPECT(strstr(features.symmetric_ctas_source, "not decided") != NULL);
  /* No second NCCL is loaded in this test program. */
  EXPECT(features.nccl_other_copies == 0 && features.nccl_other_version == 0 && features.nccl_other_library[0] == '\0');
  {
    /* A caller built before the other-copy fields gets the fields before them only. */
    const size_t cta_size = offsetof(ncclpool_features_t, nccl_other_copies);
    memset(&features, 0x5a, sizeof features);
    features.struct_size = cta_size;
    OK(ncclpool_get_features(&features));
    EXPECT(features.struct_size == cta_size);
    EXPECT(strstr(features.symmetric_ctas_source, "not decided") != NULL);
    EXPECT(features.nccl_other_copies == 0x5a5a5a5a && features.nccl_other_library[0] == 0x5a);
  }
  {
    /* A caller built before the CTA fields passes the older size: it gets those fields, and nothing
       is written past them. */
    const size_t old_size = offsetof(ncclpool_features_t, symmetric_ctas_decided);
    memset(&features, 0x5a, sizeof features);
    features.struct_size = old_size;
    OK(ncclpool_get_features(&features));
    EXPECT(features.struct_size == old_size);
    EXPECT(features.symmetric_ctas_decided == 0x5a5a5a5a && features.symmetric_ctas_source[0] == 0x5a);
    features.struct_size = old_size - 1;
    EXPECT(ncclpool_get_features(&features) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  }
}

static void test_copy_engine_vote(void) {
  int use = 7;
  char why[256];
  EXPECT(ncclpool_copy_engine_vote(-1, 0, 2, NULL, why, sizeof why) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(ncclpool_copy_engine_vote(2, 0, 2, &use, why, sizeof why) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "auto") != NULL);
  EXPECT(ncclpool_copy_engine_vote(1, 0, 0, &use, why, sizeof why) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(ncclpool_copy_engine_vote(1, -1, 2, &use, why, sizeof why) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(ncclpool_copy_engine_vote(1, 0, 2, &use, NULL, 4) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(use == 7); /* nothing written on a refused call */
  OK(ncclpool_copy_engine_vote(0, 0, 2, &use, why, sizeof why));
  EXPECT(use == 0 && strncmp(why, "off: ", 5) == 0);
  OK(ncclpool_copy_engine_vote(-1, 0, 2, &use, NULL, 0)); /* no reason asked for */
  {
    uint64_t node = 0, again = 1;
    EXPECT(ncclpool_node_id(NULL) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
    OK(ncclpool_node_id(&node));
    OK(ncclpool_node_id(&again));
    EXPECT(node == again); /* once per process */
  }
  {
    /* A short buffer gets a cut, terminated reason. */
    char tiny[4] = {'x', 'x', 'x', 'x'};
    OK(ncclpool_copy_engine_vote(0, 0, 2, &use, tiny, sizeof tiny));
    EXPECT(tiny[3] == '\0' && strlen(tiny) == 3);
  }
}

/* The symmetric fence (issue 46): declared before any attach (accepted, idempotent), reported by
   ncclpool_get_features; no decision in this process, so it launches nothing and counts the calls. */
static void test_symmetric_fence(void) {
  ncclpool_features_t before, after;
  int launched = 7;
  OK(ncclpool_prefer_symmetric_fence());
  OK(ncclpool_prefer_symmetric_fence());
  before.struct_size = sizeof before;
  OK(ncclpool_get_features(&before));
  EXPECT(before.symmetric_fence_declared == 1 && before.symmetric_kernels_decided == 0);
  if (getenv("NCCLPOOL_SYMMETRIC_FENCE") == NULL) EXPECT(strcmp(before.symmetric_fence_kind, "node") == 0); /* the default */
  EXPECT(strcmp(before.symmetric_kernels_decision, "on") == 0 || strcmp(before.symmetric_kernels_decision, "fence") == 0 ||
         strcmp(before.symmetric_kernels_decision, "guard") == 0 || strcmp(before.symmetric_kernels_decision, "off") == 0);
  OK(ncclpool_symmetric_fence(NULL, &launched));
  EXPECT(launched == 0);
  OK(ncclpool_symmetric_fence(NULL, NULL));
  after.struct_size = sizeof after;
  OK(ncclpool_get_features(&after));
  EXPECT(after.symmetric_fence_calls == before.symmetric_fence_calls + 2);
  EXPECT(after.symmetric_fences_launched == before.symmetric_fences_launched);
}

/* NCCL's own symmetric CTA count for a process whose collectives overlap compute: declared before any
   attach (accepted, idempotent), reported by ncclpool_get_features; nothing is decided by it. */
static void test_prefer_nccl_symmetric_ctas(void) {
  ncclpool_features_t f;
  f.struct_size = sizeof f;
  OK(ncclpool_get_features(&f));
  EXPECT(f.symmetric_ctas_nccl_preferred == 0 && f.symmetric_ctas_decided == 0);
  OK(ncclpool_prefer_nccl_symmetric_ctas());
  OK(ncclpool_prefer_nccl_symmetric_ctas());
  OK(ncclpool_get_features(&f));
  EXPECT(f.symmetric_ctas_nccl_preferred == 1 && f.symmetric_ctas_decided == 0);
}

static void test_alloc_free_errors(void) {
  ncclpool_pool_t pool = make_sim_pool("c-basic", NCCLPOOL_REGISTRATION_LOCAL);
  ncclpool_pool_stats_t stats;
  void* a = NULL;
  void* b = NULL;
  size_t needed = 0;
  char* json;
  EXPECT(ncclpool_alloc(pool, 0, NULL, &a) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "ncclpool_alloc") != NULL);
  EXPECT(ncclpool_last_status() == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(ncclpool_alloc(NULL, 8, NULL, &a) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(ncclpool_alloc(pool, (size_t)1 << 62, NULL, &a) == NCCLPOOL_ERROR_SIZE_TOO_LARGE);
  OK(ncclpool_alloc(pool, 1000, (void*)7, &a));
  OK(ncclpool_alloc(pool, 3u << 20, (void*)7, &b));
  EXPECT(((uintptr_t)a % 512) == 0);
  stats.struct_size = sizeof stats;
  OK(ncclpool_pool_stats(pool, &stats));
  EXPECT(stats.active_allocations == 2);
  EXPECT(stats.requested_bytes == 1000 + (3u << 20));
  EXPECT(ncclpool_pool_destroy(pool) == NCCLPOOL_ERROR_INVALID_STATE); /* live blocks */
  EXPECT(strstr(ncclpool_last_error(), "still live") != NULL);
  OK(ncclpool_free(pool, a, (void*)7));
  EXPECT(ncclpool_free(pool, a, (void*)7) == NCCLPOOL_ERROR_DOUBLE_FREE);
  EXPECT(ncclpool_free(pool, (char*)b + 512, (void*)7) == NCCLPOOL_ERROR_INVALID_POINTER);
  EXPECT(ncclpool_free(pool, &stats, (void*)7) == NCCLPOOL_ERROR_FOREIGN_POINTER);
  OK(ncclpool_free(pool, b, (void*)7));
  OK(ncclpool_free(pool, NULL, NULL)); /* like free(NULL) */
  OK(ncclpool_check(pool));
  /* OOM leaves the pool usable. */
  OK(ncclpool_sim_inject_oom(pool, 2));
  EXPECT(ncclpool_alloc(pool, 64u << 20, NULL, &a) == NCCLPOOL_ERROR_OUT_OF_MEMORY);
  OK(ncclpool_alloc(pool, 64u << 20, NULL, &a));
  OK(ncclpool_free(pool, a, NULL));
  OK(ncclpool_reserve(pool, 8u << 20));
  /* JSON: size query, too small, exact. */
  OK(ncclpool_pool_stats_json(pool, NULL, 0, &needed));
  EXPECT(needed > 10);
  json = (char*)malloc(needed);
  EXPECT(ncclpool_pool_stats_json(pool, json, needed - 1, NULL) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  OK(ncclpool_pool_stats_json(pool, json, needed, NULL));
  EXPECT(strstr(json, "\"name\":\"c-basic\"") != NULL);
  EXPECT(strstr(json, "\"oom_count\":2") != NULL);
  free(json);
  {
    size_t released = 0;
    OK(ncclpool_trim(pool, &released));
    EXPECT(released > 0);
  }
  OK(ncclpool_pool_destroy(pool));
}

static void test_registration_and_scopes(void) {
  ncclpool_pool_t pool = make_sim_pool("c-symm", NCCLPOOL_REGISTRATION_SYMMETRIC);
  ncclpool_sim_group_t world = NULL;
  ncclpool_comm_t comm = NULL;
  ncclpool_comm_t local = NULL;
  ncclpool_comm_stats_t cs;
  uint64_t live = 0;
  size_t pending = 0;
  void* p = NULL;
  void* handle = NULL;
  OK(ncclpool_sim_group_create("world", 1, 2000, &world));
  EXPECT(ncclpool_attach_sim(pool, world, 1, NCCLPOOL_REGISTRATION_DEFAULT, &comm) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  OK(ncclpool_attach_sim(pool, world, 0, NCCLPOOL_REGISTRATION_DEFAULT, &comm));
  EXPECT(ncclpool_attach_sim(pool, world, 0, NCCLPOOL_REGISTRATION_LOCAL, &local) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(local == NULL);
  /* A new segment waits for the end of the scope. */
  EXPECT(ncclpool_current_pool() == NULL);
  OK(ncclpool_scope_begin(pool));
  EXPECT(ncclpool_current_pool() == pool);
  p = ncclpool_torch_alloc(2u << 20, 0, NULL);
  EXPECT(p != NULL);
  OK(ncclpool_pending(pool, &pending));
  EXPECT(pending == 1);
  OK(ncclpool_scope_end(pool));
  EXPECT(ncclpool_current_pool() == NULL);
  OK(ncclpool_pending(pool, &pending));
  EXPECT(pending == 0);
  cs.struct_size = sizeof cs;
  OK(ncclpool_comm_stats(comm, &cs));
  EXPECT(cs.kind == NCCLPOOL_REGISTRATION_SYMMETRIC && cs.registered_segments == 1 && cs.agreements >= 1);
  OK(ncclpool_comm_handle_of(comm, p, &handle));
  EXPECT(handle != NULL);
  EXPECT(ncclpool_scope_end(pool) == NCCLPOOL_ERROR_INVALID_STATE); /* none open */
  /* Under (simulated) graph capture the scope ends without registering. */
  OK(ncclpool_sim_set_capturing(pool, 1));
  OK(ncclpool_scope_begin(pool));
  {
    void* big = ncclpool_torch_alloc(6u << 20, 0, NULL);
    EXPECT(big != NULL);
    OK(ncclpool_scope_end(pool));
    OK(ncclpool_pending(pool, &pending));
    EXPECT(pending == 1);
    EXPECT(ncclpool_commit(pool) == NCCLPOOL_ERROR_INVALID_STATE);
    OK(ncclpool_sim_set_capturing(pool, 0));
    OK(ncclpool_commit(pool));
    ncclpool_torch_free(big, 6u << 20, 0, NULL);
  }
  /* Outside a scope torch's alloc needs exactly one bound pool. */
  EXPECT(ncclpool_torch_alloc(1024, 0, NULL) == NULL);
  EXPECT(strstr(ncclpool_last_error(), "no ncclpool pool is active") != NULL);
  OK(ncclpool_torch_bind(pool));
  {
    void* q = ncclpool_torch_alloc(1024, 0, NULL);
    uint64_t failures = ncclpool_torch_failures();
    EXPECT(q != NULL);
    EXPECT(ncclpool_torch_alloc(1024, 3, NULL) == NULL); /* no pool on device 3 */
    EXPECT(ncclpool_torch_failures() == failures + 1);
    ncclpool_torch_free(q, 1024, 0, NULL);
  }
  OK(ncclpool_torch_unbind(pool));
  ncclpool_torch_free(p, 2u << 20, 0, NULL);
  OK(ncclpool_check(pool));
  EXPECT(ncclpool_pool_destroy(pool) == NCCLPOOL_ERROR_INVALID_STATE); /* symmetric still attached */
  OK(ncclpool_detach(comm));
  OK(ncclpool_sim_group_live_registrations(world, &live));
  EXPECT(live == 0);
  OK(ncclpool_pool_destroy(pool));
  OK(ncclpool_sim_group_destroy(world));
}

static void test_nested_scopes_and_failures(void) {
  ncclpool_pool_t a = make_sim_pool("c-a", NCCLPOOL_REGISTRATION_LOCAL);
  ncclpool_pool_t b = make_sim_pool("c-b", NCCLPOOL_REGISTRATION_LOCAL);
  ncclpool_sim_group_t group = NULL;
  ncclpool_comm_t comm = NULL;
  ncclpool_comm_stats_t cs;
  uint64_t live = 0;
  void* p;
  OK(ncclpool_sim_group_create("dp", 1, 2000, &group));
  OK(ncclpool_attach_sim(a, group, 0, NCCLPOOL_REGISTRATION_DEFAULT, &comm));
  OK(ncclpool_scope_begin(a));
  OK(ncclpool_scope_begin(b));
  EXPECT(ncclpool_scope_end(a) == NCCLPOOL_ERROR_INVALID_STATE);
  EXPECT(strstr(ncclpool_last_error(), "reverse order") != NULL);
  OK(ncclpool_scope_end(b));
  /* A failing local registration fails the allocation and leaves nothing behind. */
  OK(ncclpool_sim_group_inject_failure(group, 0, 0, 1));
  EXPECT(ncclpool_torch_alloc(1024, 0, NULL) == NULL);
  EXPECT(ncclpool_last_status() == NCCLPOOL_ERROR_REGISTRATION);
  p = ncclpool_torch_alloc(1024, 0, NULL);
  EXPECT(p != NULL);
  OK(ncclpool_scope_end(a));
  cs.struct_size = sizeof cs;
  OK(ncclpool_comm_stats(comm, &cs));
  EXPECT(cs.registered_segments == 1 && cs.errors == 1);
  ncclpool_torch_free(p, 1024, 0, NULL);
  OK(ncclpool_check(a));
  OK(ncclpool_forget(comm));
  OK(ncclpool_pool_destroy(a));
  OK(ncclpool_pool_destroy(b));
  OK(ncclpool_sim_group_live_registrations(group, &live));
  EXPECT(live == 1); /* forget does not call the communicator: its registration stays counted */
  OK(ncclpool_sim_group_destroy(group));
}

/* Destroying a pool whose scope is open was a use after free (the torch allocator kept routing to
 * it); it is refused, and the pool still works. ncclpool_free_on_alloc_stream frees on the
 * allocation's stream. */
static void test_destroy_with_open_scope_and_free_stream(void) {
  ncclpool_pool_t pool = make_sim_pool("c-scope", NCCLPOOL_REGISTRATION_LOCAL);
  ncclpool_pool_stats_t st;
  void* p = NULL;
  void* q = NULL;
  uint64_t reuses = 0;
  uint64_t publishes = 0;
  OK(ncclpool_scope_begin(pool));
  EXPECT(ncclpool_pool_destroy(pool) == NCCLPOOL_ERROR_INVALID_STATE);
  EXPECT(strstr(ncclpool_last_error(), "scope(s) of this pool are still open") != NULL);
  p = ncclpool_torch_alloc(4096, 0, NULL);
  EXPECT(p != NULL);
  ncclpool_torch_free(p, 4096, 0, NULL);
  OK(ncclpool_scope_end(pool));
  OK(ncclpool_alloc(pool, 4096, (void*)7, &p));
  OK(ncclpool_free_on_alloc_stream(pool, p));
  st.struct_size = sizeof st;
  OK(ncclpool_pool_stats(pool, &st));
  reuses = st.cross_stream_reuses;
  publishes = st.stream_publishes; /* the torch free above published (ncclpool_torch_free does) */
  OK(ncclpool_alloc(pool, 4096, (void*)7, &q));
  OK(ncclpool_pool_stats(pool, &st));
  EXPECT(q == p);
  EXPECT(st.cross_stream_reuses == reuses); /* freed on stream 7, taken again on 7: no cross-stream reuse */
  EXPECT(st.stream_publishes == publishes); /* the same stream's reuse records no event */
  OK(ncclpool_free_on_alloc_stream(pool, q));
  EXPECT(ncclpool_free_on_alloc_stream(pool, q) == NCCLPOOL_ERROR_DOUBLE_FREE);
  OK(ncclpool_poll(pool));
  OK(ncclpool_pool_destroy(pool));
}

/* An auto pool without a profile for the simulator: built-in routes (windows at every size), so an
 * AUTO attach is collective (one rank here) and a block's segment gets a window at the scope end. */
static void test_auto_pool(void) {
  ncclpool_pool_t pool = make_sim_pool("c-auto", NCCLPOOL_REGISTRATION_AUTO);
  ncclpool_pool_t local = make_sim_pool("c-local", NCCLPOOL_REGISTRATION_LOCAL);
  ncclpool_sim_group_t group = NULL;
  ncclpool_comm_t comm = NULL;
  ncclpool_comm_stats_t cs;
  void* p = NULL;
  void* handle = NULL;
  char json[8192];
  OK(ncclpool_sim_group_create("c-auto-world", 1, 2000, &group));
  EXPECT(ncclpool_attach_sim(local, group, 0, NCCLPOOL_REGISTRATION_AUTO, &comm) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "not an auto pool") != NULL);
  EXPECT(ncclpool_attach_sim(pool, group, 0, (ncclpool_registration_t)3, &comm) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  OK(ncclpool_attach_sim(pool, group, 0, NCCLPOOL_REGISTRATION_DEFAULT, &comm));
  OK(ncclpool_scope_begin(pool));
  p = ncclpool_torch_alloc(2u << 20, 0, NULL);
  EXPECT(p != NULL);
  OK(ncclpool_scope_end(pool));
  OK(ncclpool_comm_handle_of(comm, p, &handle));
  EXPECT(handle != NULL);
  cs.struct_size = sizeof cs;
  OK(ncclpool_comm_stats(comm, &cs));
  EXPECT(cs.kind == NCCLPOOL_REGISTRATION_AUTO);
  EXPECT(cs.registered_segments == 1);
  OK(ncclpool_pool_stats_json(pool, json, sizeof json, NULL));
  EXPECT(strstr(json, "\"kind\":\"auto\",\"rank\":0,\"size\":1,\"device\":0,\"registrations\":") != NULL);
  EXPECT(strstr(json, "\"description\":\"symmetric at every size\"") != NULL);
  EXPECT(ncclpool_pool_destroy(pool) == NCCLPOOL_ERROR_INVALID_STATE); /* windows attached, a block live */
  ncclpool_torch_free(p, 2u << 20, 0, NULL);
  OK(ncclpool_check(pool));
  OK(ncclpool_detach(comm));
  OK(ncclpool_pool_destroy(pool));
  OK(ncclpool_pool_destroy(local));
  OK(ncclpool_sim_group_destroy(group));
}

/* The stats structs start with struct_size (too small, or no version's size: INVALID_ARGUMENT, nothing
 * written; a newer caller's larger struct gets this library's fields), and ncclpool_stats_fields
 * describes each struct member by member, in the order of the lists in stats_fields.h. */
static void test_stats_structs(void) {
  ncclpool_pool_t pool = make_sim_pool("c-stats", NCCLPOOL_REGISTRATION_LOCAL);
  ncclpool_sim_group_t group = NULL;
  ncclpool_comm_t comm = NULL;
  const ncclpool_stats_field_t* fields = NULL;
  size_t count = 0;
  size_t i = 0;
  void* p = NULL;
  struct {
    ncclpool_pool_stats_t stats;
    uint64_t newer_field; /* what a caller built against a later header would have */
  } newer;
  ncclpool_pool_stats_t st;
  ncclpool_comm_stats_t cs;
  OK(ncclpool_alloc(pool, 1000, NULL, &p));
  memset(&st, 0x5a, sizeof st);
  st.struct_size = 0;
  EXPECT(ncclpool_pool_stats(pool, &st) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(ncclpool_last_status() == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "ncclpool_pool_stats: stats->struct_size is 0, smaller than any version of ncclpool_pool_stats_t") != NULL);
  EXPECT(strstr(ncclpool_last_error(), "set it to sizeof(ncclpool_pool_stats_t)") != NULL);
  EXPECT(st.struct_size == 0 && st.active_allocations == 0x5a5a5a5a5a5a5a5aull); /* nothing written */
  st.struct_size = sizeof st - 8;
  EXPECT(ncclpool_pool_stats(pool, &st) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  st.struct_size = sizeof st + 4; /* not a struct's size: it would end inside a field */
  EXPECT(ncclpool_pool_stats(pool, &st) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "not the size of any version of ncclpool_pool_stats_t") != NULL);
  st.struct_size = sizeof st;
  OK(ncclpool_pool_stats(pool, &st));
  EXPECT(st.struct_size == sizeof st && st.active_allocations == 1 && st.requested_bytes == 1000);
  memset(&newer, 0x5a, sizeof newer);
  newer.stats.struct_size = sizeof newer;
  OK(ncclpool_pool_stats(pool, &newer.stats));
  EXPECT(newer.stats.struct_size == sizeof newer.stats); /* what this library wrote */
  EXPECT(newer.stats.active_allocations == 1 && newer.newer_field == 0x5a5a5a5a5a5a5a5aull);
  EXPECT(ncclpool_pool_stats(pool, NULL) == NCCLPOOL_ERROR_INVALID_ARGUMENT);

  OK(ncclpool_sim_group_create("c-stats-world", 1, 2000, &group));
  OK(ncclpool_attach_sim(pool, group, 0, NCCLPOOL_REGISTRATION_LOCAL, &comm));
  cs.struct_size = sizeof cs - 1;
  EXPECT(ncclpool_comm_stats(comm, &cs) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "ncclpool_comm_stats: stats->struct_size") != NULL);
  cs.struct_size = sizeof cs;
  OK(ncclpool_comm_stats(comm, &cs));
  EXPECT(cs.kind == NCCLPOOL_REGISTRATION_LOCAL && cs.rank == 0 && cs.size == 1 && cs.device == 0);
  EXPECT(cs.registered_segments == 1 && cs.registrations == 1);
  st.struct_size = sizeof st;
  OK(ncclpool_pool_stats(pool, &st));
  EXPECT(st.attached_communicators == 1 && st.pending_registrations == 0);

  /* The tables: struct_size, then the list's fields with their C offsets. */
  EXPECT(ncclpool_stats_fields((ncclpool_stats_kind_t)2, &fields, &count) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "stats kind 2") != NULL);
  EXPECT(ncclpool_stats_fields(NCCLPOOL_STATS_POOL, NULL, &count) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  OK(ncclpool_stats_fields(NCCLPOOL_STATS_POOL, &fields, &count));
  EXPECT(strcmp(fields[0].name, "struct_size") == 0 && fields[0].type == NCCLPOOL_FIELD_SIZE && fields[0].offset == 0);
  i = 1;
#define CHECK_POOL_ROW(type_, name_, merge_, scope_, doc_)                                               \
  EXPECT(i < count && strcmp(fields[i].name, #name_) == 0 && fields[i].offset == offsetof(ncclpool_pool_stats_t, name_) && \
         fields[i].type == NCCLPOOL_STATS_FIELD_TYPE_##type_ && strcmp(fields[i].doc, doc_) == 0); \
  ++i;
  NCCLPOOL_POOL_STATS_FIELDS(CHECK_POOL_ROW)
#undef CHECK_POOL_ROW
  EXPECT(i == count && count == 1 + NCCLPOOL_POOL_STATS_FIELDS_0_1);
  EXPECT(fields[count - 1].offset + 8 == sizeof(ncclpool_pool_stats_t));
  OK(ncclpool_stats_fields(NCCLPOOL_STATS_COMM, &fields, &count));
  EXPECT(strcmp(fields[0].name, "struct_size") == 0);
  i = 1;
#define CHECK_COMM_ROW(type_, name_, merge_, scope_, doc_)                                               \
  EXPECT(i < count && strcmp(fields[i].name, #name_) == 0 && fields[i].offset == offsetof(ncclpool_comm_stats_t, name_) && \
         fields[i].type == NCCLPOOL_STATS_FIELD_TYPE_##type_);                                      \
  ++i;
  NCCLPOOL_COMM_STATS_FIELDS(CHECK_COMM_ROW)
#undef CHECK_COMM_ROW
  EXPECT(i == count && count == 1 + NCCLPOOL_COMM_STATS_FIELDS_0_1);
  EXPECT(fields[1].type == NCCLPOOL_FIELD_REGISTRATION && fields[2].type == NCCLPOOL_FIELD_INT);

  OK(ncclpool_free(pool, p, NULL));
  OK(ncclpool_detach(comm));
  OK(ncclpool_pool_destroy(pool));
  OK(ncclpool_sim_group_destroy(group));
}

/* ncclpool_vote_no, agreed settings and reserve's bounds, on a one-rank group (the multi-rank cases are
 * tests/common/lockstep_cases.hpp): a "no" waits for a collective step, which takes it once. */
static void test_votes_settings_and_reserve_bounds(void) {
  ncclpool_pool_options_t options;
  ncclpool_pool_options_t resolved;
  ncclpool_pool_t pool = NULL;
  ncclpool_sim_group_t group = NULL;
  ncclpool_comm_t comm = NULL;
  ncclpool_comm_stats_t stats;
  void* p = NULL;
  size_t pending = 0;
  ncclpool_pool_options_init(&options);
  options.name = "c-votes";
  options.source = NCCLPOOL_SOURCE_SIM;
  options.default_registration = NCCLPOOL_REGISTRATION_SYMMETRIC;
  options.sim_capacity = (size_t)64 << 20;
  options.growth_chunk = 4u << 20;
  options.agreed_settings = "kind=symmetric;checks=off";
  OK(ncclpool_pool_create(&options, &pool));
  resolved.struct_size = sizeof resolved;
  OK(ncclpool_pool_get_options(pool, &resolved));
  EXPECT(resolved.agreed_settings != NULL && strcmp(resolved.agreed_settings, "kind=symmetric;checks=off") == 0);
  /* Issue 44 item 8: a size whose rounding overflowed reserved ~2 MiB and said success; so did one
     past the device's capacity once something was reserved. */
  EXPECT(ncclpool_reserve(pool, (size_t)-1) == NCCLPOOL_ERROR_SIZE_TOO_LARGE);
  OK(ncclpool_reserve(pool, 4u << 20));
  EXPECT(ncclpool_reserve(pool, ((size_t)64 << 20) + 1) == NCCLPOOL_ERROR_SIZE_TOO_LARGE);
  EXPECT(strstr(ncclpool_last_error(), "capacity") != NULL);
  EXPECT(ncclpool_vote_no(NULL, "x") == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  OK(ncclpool_sim_group_create("c-votes", 1, 2000, &group));
  /* A "no" before the attach: the attach agreement takes it; the next attach agrees. */
  OK(ncclpool_vote_no(pool, "the first use failed on this rank"));
  EXPECT(ncclpool_attach_sim(pool, group, 0, NCCLPOOL_REGISTRATION_SYMMETRIC, &comm) == NCCLPOOL_ERROR_INVALID_STATE);
  EXPECT(strstr(ncclpool_last_error(), "the first use failed on this rank") != NULL);
  OK(ncclpool_attach_sim(pool, group, 0, NCCLPOOL_REGISTRATION_SYMMETRIC, &comm));
  /* A "no" before a commit: nothing registered there, then the next commit registers. */
  OK(ncclpool_alloc(pool, 8u << 20, NULL, &p)); /* a new segment: its window pending */
  OK(ncclpool_vote_no(pool, "out of memory in the layer above"));
  OK(ncclpool_vote_no(pool, "a later failure")); /* the first one is kept */
  EXPECT(ncclpool_commit(pool) == NCCLPOOL_ERROR_INVALID_STATE);
  EXPECT(strstr(ncclpool_last_error(), "out of memory in the layer above") != NULL);
  OK(ncclpool_pending(pool, &pending));
  EXPECT(pending == 1);
  OK(ncclpool_commit(pool)); /* the vote was taken once */
  OK(ncclpool_pending(pool, &pending));
  EXPECT(pending == 0);
  /* A scope left with an error where it is not an agreement point keeps its "no" (item 2): scope
     ends 0..15 are scheduled, 16 too, 17 is not. */
  {
    int i;
    for (i = 0; i < 17; ++i) {
      OK(ncclpool_scope_begin(pool));
      OK(ncclpool_scope_end(pool));
    }
    OK(ncclpool_scope_begin(pool));
    OK(ncclpool_scope_end_after_error(pool)); /* scope end 17 */
    EXPECT(ncclpool_commit(pool) == NCCLPOOL_ERROR_INVALID_STATE);
    EXPECT(strstr(ncclpool_last_error(), "ended with an error") != NULL);
    OK(ncclpool_commit(pool));
  }
  stats.struct_size = sizeof stats;
  OK(ncclpool_comm_stats(comm, &stats));
  EXPECT(stats.registered_segments == 2);
  OK(ncclpool_free(pool, p, NULL));
  OK(ncclpool_detach(comm));
  OK(ncclpool_pool_destroy(pool));
  /* A caller built before agreed_settings passes the smaller struct: accepted, no settings. */
  ncclpool_pool_options_init(&options);
  options.source = NCCLPOOL_SOURCE_SIM;
  options.struct_size = offsetof(ncclpool_pool_options_t, agreed_settings);
  OK(ncclpool_pool_create(&options, &pool));
  memset(&resolved, 0xff, sizeof resolved);
  resolved.struct_size = offsetof(ncclpool_pool_options_t, agreed_settings);
  OK(ncclpool_pool_get_options(pool, &resolved));
  EXPECT(resolved.agreed_settings == (const char*)(uintptr_t)-1); /* not written: the caller has no such field */
  OK(ncclpool_attach_sim(pool, group, 0, NCCLPOOL_REGISTRATION_LOCAL, &comm)); /* no settings: not collective */
  OK(ncclpool_detach(comm));
  OK(ncclpool_pool_destroy(pool));
  options.struct_size = 12;
  EXPECT(ncclpool_pool_create(&options, &pool) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  OK(ncclpool_sim_group_destroy(group));
}

/* Issue 47 defect 1: attach_nccl refuses what is surely no ncclComm_t, and any value on a SIM pool
 * (it used to hand 0xdeadbeef to NCCL, a segmentation fault in a build with NCCL). */
static void test_attach_nccl_refusals(void) {
  ncclpool_pool_t pool = make_sim_pool("attach_nccl_refusals", NCCLPOOL_REGISTRATION_LOCAL);
  ncclpool_comm_t comm = NULL;
  void* bad[] = {NULL, (void*)(size_t)0xdeadbeef, (void*)(ptrdiff_t)-1, (void*)(ptrdiff_t)-4096};
  size_t i;
  for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    EXPECT(ncclpool_attach_nccl(pool, bad[i], NCCLPOOL_REGISTRATION_LOCAL, &comm) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(ncclpool_last_error(), "is not an ncclComm_t") != NULL);
    EXPECT(comm == NULL);
  }
  EXPECT(ncclpool_attach_nccl(pool, (void*)(size_t)0x10000, NCCLPOOL_REGISTRATION_LOCAL, &comm) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ncclpool_last_error(), "is a simulator (SIM) pool") != NULL);
  EXPECT(ncclpool_sim_inject_oom(pool, -1) == NCCLPOOL_ERROR_INVALID_ARGUMENT);
  OK(ncclpool_sim_inject_oom(pool, 0));
  OK(ncclpool_pool_destroy(pool));
}

int main(void) {
  test_status_and_version();
  test_copy_engine_vote();
  test_symmetric_fence();
  test_prefer_nccl_symmetric_ctas();
  test_alloc_free_errors();
  test_registration_and_scopes();
  test_nested_scopes_and_failures();
  test_destroy_with_open_scope_and_free_stream();
  test_auto_pool();
  test_stats_structs();
  test_votes_settings_and_reserve_bounds();
  test_attach_nccl_refusals();
  printf("test_capi: %d checks passed\n", checks);
  return 0;
}
