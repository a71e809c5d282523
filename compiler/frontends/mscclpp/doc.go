// Package mscclpp imports MSCCL++ execution plans (the JSON the MSCCL++
// DSL writes and the MSCCL++ executor runs) into the primitive level of the
// Theseus IR (docs/design/ir.md §5.1, §5.3, §5.4).
//
// Two dialects are read and told apart by their keys:
//
//   - v0.7 (microsoft/mscclpp v0.7.0, src/executor/execution_plan.cc):
//     camelCase chunk counts (inputChunks, chunkGroups), channels keyed by
//     (srcbuff, dstbuff, type), ops with i_buff/i_cids/o_buff/o_cids,
//     srcs/dsts and srcbuff/srcoff/dstbuff/dstoff.
//   - v0.8+ (v0.8.0 through v0.10 and later,
//     src/core/executor/execution_plan.cc): snake_case chunk counts,
//     channels keyed by type only, remote_buffers and per-threadblock
//     remote_buffer_refs, ops with src_buff/dst_buff, semaphores, pipeline
//     ops with iter_context.
//
// Channels become paired ir.Channel ends. MSCCL++ pairs them by creation
// order per peer and channel type: the k-th memory (port) channel that rank
// A lists towards rank B is connected to the k-th memory (port) channel
// that B lists towards A, counting in the order of the plan's channel list
// expanded by connectedTo/connected_to; the buffer key of v0.7 plays no part
// in the pairing. Where one side lists fewer, MSCCL++ adds unused channels to
// it, and so does the importer (docs/importers.md, "Channel pairing").
//
// Every data op (put, get, copy, the read-reduce and reduce-send families
// and every packet op) becomes copy or reduce with remote and/or packet
// refs; the signal and flush parts of pws/pwsf become separate ops; nop (a
// __syncthreads of one threadblock in MSCCL++) becomes a nop without
// dependencies; barrier becomes barrier. NVLS plans (nvls or switch
// channels, glres, gstore, gstorepkt), rank-local semaphores (sem_acquire,
// sem_release) and thread-block groups are rejected with TS0007; a pipeline
// op is mapped onto the IR's slices when the whole program is one pipeline,
// and rejected otherwise.
//
// Parse checks the format and resolves every index it needs to build the
// IR (channel ids, remote buffer ids); whether the schedule is right is the
// verifier's job (compiler/verify). JSON is decoded with encoding/json's
// token stream, keeping the byte offset of every value, so every rank,
// threadblock and op keeps its file:line:col.
package mscclpp
