// The funcsion metadata service (FuncStore Sec. III-A to III-C, IV).
//
// Regenerate the Python code with scripts/gen-thrift; the generated package is
// funcsion_rpc/gen/metadata and is checked in (a test fails when it is stale).
// Transport: TFramedTransport; protocol: TBinaryProtocol (the accelerated
// implementation on both sides when available).
//
// Tokens: every run-scoped call carries the run's token (from start_run);
// control calls (workflows, runs, capacity, stats, storage instructions) carry
// the server's admin token.

namespace py funcsion_rpc.gen.metadata

enum ErrorCode {
  UNKNOWN_RUN = 1,
  RUN_ENDED = 2,
  UNKNOWN_WORKFLOW = 3,
  UNKNOWN_OBJECT = 4,
  NOT_WRITTEN = 5,
  EXPIRED = 6,
  UNDECLARED_OUTPUT = 7,
  DUPLICATE_WRITE = 8,
  UNAUTHORIZED = 9,
  INVALID_REQUEST = 10,
  UNAVAILABLE = 11,
  INTERNAL = 99,
}

exception MetadataFault {
  1: i32 code,
  2: string message,
  3: string run_id,
  4: string function_name,
  5: string object_name,
}

// length bytes at offset of block `block` of storage function `function`; chunk = EC chunk index
struct Extent {
  1: string function_name,
  2: i32 block,
  3: i64 offset,
  4: i64 length,
  5: i32 chunk,
}

// tier: memory | cos | empty;  kind: slice | blocks | cos | empty
// daemon: the id of the storage daemon whose functions hold the extents (a deployment of several
// daemons: the client sends the object's PUT / GET / free there); unset or "": the only daemon
struct Placement {
  1: string tier,
  2: string kind,
  3: list<Extent> extents,
  4: i32 data_chunks,
  5: i32 parity_chunks,
  6: i64 chunk_size,
  7: optional string daemon,
}

struct WorkflowInfo {
  1: string key,
  2: i32 functions,
  3: i32 objects,
}

// Pocket's register_job hints (all optional): most tasks running at once, the most bytes the run
// holds, and whether it is latency sensitive (false: its data may live in COS, not function memory);
// input_bytes: the bytes of the run's inputs as the driver that starts it uploads them (a lifetime
// model's input-size feature; unset or 0: unknown, as from a client before this field)
struct RunHints {
  1: i32 max_concurrency,
  2: i64 capacity_bytes,
  3: bool latency_sensitive = true,
  4: optional i64 input_bytes,
}

// plan_json: what the hints decided ({"tier", "budget_bytes", "functions", "reserve_blocks", ...})
struct RunInfo {
  1: string run_id,
  2: string token,
  3: string workflow_key,
  4: string policy,
  5: string plan_json,
}

// persist: keep the object past its run (in COS) until deleted; adhoc: a key the WDS does not declare
// (no read count: freed by delete, by a get with delete_after at the reader's commit, or at run end)
struct PutRequest {
  1: string object_name,
  2: i64 size,
  3: string checksum,
  4: bool persist,
  5: bool adhoc,
  // coded objects: bytes per erasure-code chunk as the client's codec lays them out (its
  // stripes' chunks end to end, headers included); 0: the server assumes ceil(size / d)
  6: optional i64 chunk_bytes,
}

// existing: the same write again (a retry); freed: that object is gone already, send no data;
// already_committed: the writing function committed in an earlier attempt;
// readable: an existing write that was finished (its bytes reached the store), send no data;
// expires_at_ms: when the object is predicted to be freed (the put's time plus its predicted
// lifetime, Unix ms), for a declared object of a run that frees on commit; unset otherwise.
// The client passes it to the storage daemon with the PUT (a write-behind can skip uploading
// what will die before its upload is due);
// readers: a declared object's read count from the HDAG (unset for ad hoc objects); the client
// passes it with the PUT, and the daemon loads copies of a many-reader object (a broadcast) into
// cache functions before its readers arrive
struct PutGrant {
  1: string object_name,
  2: i64 size,
  3: Placement placement,
  4: bool existing,
  5: bool freed,
  6: bool already_committed,
  7: optional bool readable,
  8: optional i64 expires_at_ms,
  9: optional i32 readers,
}

// committed: this put was the function's last declared output and committed its reads
struct PutResult {
  1: string object_name,
  2: bool committed,
  3: bool already_committed,
  4: list<string> freed,
}

// recorded: the read entered the commit buffer now (false for a repeat or an undeclared reader);
// already_committed: the reader committed in an earlier attempt, return that attempt's result
struct GetResult {
  1: string object_name,
  2: i64 size,
  3: string checksum,
  4: Placement placement,
  5: bool recorded,
  6: bool already_committed,
  // this read freed the object (oracle: the last declared read): the reader frees its bytes
  // from function memory once it has them; a drop instruction after a grace period covers a
  // reader that dies first
  7: optional bool freed_by_read,
  // this read was the object's last declared one (funcstore): once the reader has the bytes it
  // calls read_done, which releases the object's function memory (the daemon keeps the durable
  // copy, which serves a re-run reader until the last commit frees the object)
  8: optional bool last_read,
}

// read_batch's reply: get_batch without the placements, one byte per object asked, in order
// (what a task's get_many needs). tiers: m (memory), c (cos), e (empty); flags: 1 recorded,
// 2 already_committed, 4 freed_by_read, 8 last_read (funcsion_rpc.reads)
// daemons: with several storage daemons, per object the id of the daemon holding it in memory
// ("" for the COS tier and empty objects); unset with one daemon
struct ReadBatch {
  1: binary tiers,
  2: binary flags,
  3: optional list<string> daemons,
}

struct CommitResult {
  1: string function_name,
  2: i32 records,
  3: bool already_committed,
  4: list<string> freed,
}

// state: pending | allocated | readable | freed | kept
struct ObjectStatus {
  1: string object_name,
  2: string state,
  3: string producer,
  4: i32 declared_reads,
  5: i32 remaining,
  6: i64 size,
  7: string checksum,
  8: bool persist,
  9: list<string> committed_by,
  10: optional Placement placement,
  11: string freed_reason,
  12: double written_at,
  13: double readable_at,
  14: double freed_at,
  15: bool adhoc,
  // why the object lives in the COS tier instead of function memory ("" for memory objects)
  16: optional string tier_reason,
  // when its last declared read released its function memory (funcstore); absent: not released
  17: optional double released_at,
}

// what a task needs to know about itself: its declared objects, and whether it committed already
struct FunctionStatus {
  1: string function_name,
  2: i32 stage,
  3: list<string> inputs,
  4: list<string> outputs,
  5: bool committed,
}

// kind: drop (drop the object's chunks at `extents`, and its COS copy unless keep_cos;
//             tier "cos": the object was written to COS only)
//       scale_out (start storage functions for at least `blocks` more blocks)
//       release_function (every block of function_name is free: it may leave the pool)
//       move (GC compaction: the object was read on a degraded GC bucket's function; copy each
//             chunk whose place changed from `old_extents` to `extents`, then drop the old copy;
//             function_name: the id of the daemon holding it, "" for the only one)
struct Instruction {
  1: i64 seq,
  2: string kind,
  3: string run_id,
  4: string object_name,
  5: list<Extent> extents,
  6: bool keep_cos,
  7: i64 blocks,
  8: string function_name,
  9: string reason,
  10: string tier,
  11: optional list<Extent> old_extents,
}

// the load of one storage function as its daemon sees it when it fetches instructions
// (SION Fig. 5 TestAndPlace's queue test, on the metadata-placed path): requests queued or
// in flight to it, and the bytes of the PUT chunks among them not yet stored
struct FunctionLoad {
  1: i32 queued,
  2: i64 inflight_bytes,
}

// Stats are a JSON document (see MetadataState.stats): counters, live and
// allocated bytes, samples over time, one summary per run.
struct Health {
  1: string status,
  2: double uptime_s,
  3: i32 running_runs,
  4: i64 journal_seq,
  5: string version,
}

service Metadata {
  Health health(),

  // -- control (admin token)
  WorkflowInfo register_workflow(1: string admin_token, 2: string wds_json, 3: map<string, i64> params,
                                 4: string source) throws (1: MetadataFault fault),
  void deregister_workflow(1: string admin_token, 2: string key) throws (1: MetadataFault fault),
  RunInfo start_run(1: string admin_token, 2: string workflow_key, 3: string policy, 4: i64 ttl_ms,
                    5: RunHints hints) throws (1: MetadataFault fault),
  // daemon: the id of the storage daemon that owns the function (several daemons: each object's
  // chunks are placed on one daemon's functions); unset or "": a deployment's only daemon
  i32 register_capacity(1: string admin_token, 2: string function_name, 3: i32 blocks,
                        4: string daemon) throws (1: MetadataFault fault),
  i32 unregister_capacity(1: string admin_token, 2: string function_name) throws (1: MetadataFault fault),
  string stats(1: string admin_token) throws (1: MetadataFault fault),
  // storage-layer instructions with seq > after_seq (oldest first, at most max_items); calling it
  // again with after_seq = the last seq you carried out acknowledges everything up to it;
  // daemon (optional): the id of one of several daemons acknowledging for itself (an instruction
  // stays until every daemon has carried it out); unset: the only daemon
  // loads (optional): the daemon's storage functions with requests queued or in flight, by name
  // (any function not named is idle); the allocator's coded placement skips busy ones a while.
  // buckets (optional): the daemon's GC window, the functions that must not take new data by
  // name: "active" (an older bucket), "degraded" or "released" (any function not named is in
  // the newest bucket); the allocator places new data on the newest bucket's functions
  list<Instruction> fetch_instructions(1: string admin_token, 2: i64 after_seq, 3: i32 max_items,
                                       4: map<string, FunctionLoad> loads, 5: map<string, string> buckets,
                                       6: string daemon)
      throws (1: MetadataFault fault),

  // -- one run (its token; end_run also takes the admin token)
  string end_run(1: string token, 2: string run_id, 3: string outcome) throws (1: MetadataFault fault),
  PutGrant begin_put(1: string token, 2: string run_id, 3: string function_name, 4: PutRequest request)
      throws (1: MetadataFault fault),
  PutResult finish_put(1: string token, 2: string run_id, 3: string function_name, 4: string object_name)
      throws (1: MetadataFault fault),
  // delete_after: free this ad-hoc object once the reader commits (Pocket's DELETE flag)
  GetResult get(1: string token, 2: string run_id, 3: string function_name, 4: string object_name,
                5: bool delete_after) throws (1: MetadataFault fault),
  CommitResult commit(1: string token, 2: string run_id, 3: string function_name)
      throws (1: MetadataFault fault),
  // also drops a kept (persisted) object of an ended run
  void delete_object(1: string token, 2: string run_id, 3: string object_name) throws (1: MetadataFault fault),
  ObjectStatus lookup(1: string token, 2: string run_id, 3: string object_name) throws (1: MetadataFault fault),
  // the store refused the placed object for lack of room (the daemon's pool has no such function):
  // the writer stores it in the COS tier instead, and the object's placement becomes COS
  PutGrant fallback_to_cos(1: string token, 2: string run_id, 3: string function_name, 4: string object_name,
                           5: string reason) throws (1: MetadataFault fault),
  list<ObjectStatus> list_objects(1: string token, 2: string run_id, 3: string prefix)
      throws (1: MetadataFault fault),
  FunctionStatus describe_function(1: string token, 2: string run_id, 3: string function_name)
      throws (1: MetadataFault fault),

  // -- batches: applied in order, stop at the first refusal (which is raised; earlier items applied)
  list<GetResult> get_batch(1: string token, 2: string run_id, 3: string function_name,
                            4: list<string> object_names) throws (1: MetadataFault fault),
  // get_batch's reads (recorded and journaled alike), answered as columns: no struct per object
  ReadBatch read_batch(1: string token, 2: string run_id, 3: string function_name,
                       4: list<string> object_names) throws (1: MetadataFault fault),
  // the reader has the bytes of reads answered as last ones (GetResult.last_read): their function
  // memory is released now (funcstore); returns the objects released (others: already, or not
  // this reader's to release)
  list<string> read_done(1: string token, 2: string run_id, 3: string function_name,
                         4: list<string> object_names) throws (1: MetadataFault fault),
  list<PutGrant> begin_put_batch(1: string token, 2: string run_id, 3: string function_name,
                                 4: list<PutRequest> requests) throws (1: MetadataFault fault),
  list<PutResult> finish_put_batch(1: string token, 2: string run_id, 3: string function_name,
                                   4: list<string> object_names) throws (1: MetadataFault fault),
}
