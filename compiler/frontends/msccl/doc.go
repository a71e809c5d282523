// Package msccl imports MSCCL XML algorithm files (the format written by
// microsoft/msccl-tools and read by the MSCCL executor in
// Azure/msccl-executor-nccl and RCCL) into the transfer level of the Theseus
// IR (docs/design/ir.md §5.2).
//
// Parse reads one <algo> element with its <gpu>, <tb> and <step> children.
// The mapping follows what the MSCCL runtime does with a file, not what the
// generator may have meant, where the two differ; docs/importers.md lists
// every attribute and step type, what it becomes, and what is rejected:
//
//   - step types s, r, rcs, rrs, rrc, rrcs become send, recv, rcs, rrs, rrc,
//     rrcs; cpy becomes copy; re becomes reduce [dst, src] → dst, and
//     consecutive re steps that MSCCL fuses into one multi-source reduction
//     (same dst and src buffer, same dst offset, the later ones without
//     depid, at most 16 per threadblock run) become one reduce; nop becomes
//     nop. ra (an old-runtime op) is rejected (TS0007).
//   - depid/deps become ir.Dep (renumbered through the fusion), hasdep
//     becomes Publish. A dependency on a step that does not publish is kept
//     as written: the verifier reports it (TS0202).
//   - ChunksPerBlock is nchunksperloop divided by MSCCL's size multiplier
//     (ngpus for allgather, reducescatter and alltoall, 1 otherwise); a
//     remainder is TS0109.
//   - LL128 becomes Simple with a TS0008 warning.
//
// Parse checks the format (well-formed XML, element and attribute names,
// value domains, ids, size limits); whether the schedule is right (ranges
// against buffers, peers, pairing, synchronisation, the postcondition) is
// the verifier's job (compiler/verify). Every gpu, tb and step keeps its
// source position, and every diagnostic carries file:line:col (1-based line
// and byte column), a stable code from diag and a hint.
//
// XML is decoded with encoding/xml; positions come from
// Decoder.InputOffset, mapped to lines and columns.
package msccl
