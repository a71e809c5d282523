package mscclpp

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
)

// mustParse parses and fails on any error diagnostic.
func mustParse(t *testing.T, src string) (*ir.Program, []diag.Diagnostic) {
	t.Helper()
	return importtest.MustParse(t, Parse, "t.json", src)
}

// wantErr parses and checks that exactly the given codes are reported as
// errors, and that the first one mentions msg; it returns the diagnostics.
func wantErr(t *testing.T, src, msg string, codes ...diag.Code) []diag.Diagnostic {
	t.Helper()
	return importtest.WantErr(t, Parse, "t.json", src, msg, codes...)
}

func codesOf(ds []diag.Diagnostic, sev diag.Severity) []diag.Code {
	var out []diag.Code
	for _, d := range ds {
		if d.Severity == sev {
			out = append(out, d.Code)
		}
	}
	return out
}

// A v0.7 send/recv over a port channel: each rank puts its input into the
// peer's scratch chunk 1 with signal and flush, waits for the peer's
// signal, and copies scratch chunk 1 to its output.
const sendRecv07 = `{
  "name": "sr", "collective": "sendrecv", "protocol": "Simple", "inplace": false,
  "gpus": [
    {"id": 0, "inputChunks": 1, "outputChunks": 1, "scratchChunks": 2, "chunkGroups": 1,
     "threadblocks": [{"id": 0,
        "ops": [
          {"name": "pwsf", "o_buff": {"src": "i", "dst": "s"}, "o_cids": [{"id": 0, "off": 1}],
           "srcs": [{"buff": "i", "off": 0}], "ctype": "proxy", "cnt": 1},
          {"name": "wait", "i_buff": {"src": "i", "dst": "s"}, "i_cids": [{"id": 0, "off": 0}], "ctype": "proxy", "cnt": 1},
          {"name": "nop", "deps": [{"tb": 0, "step": 1}]},
          {"name": "copy", "srcbuff": "s", "srcoff": 1, "dstbuff": "o", "dstoff": 0, "ctype": "none", "cnt": 1}],
        "channels": [{"src": "i", "dst": "s", "ctype": "proxy", "cids": [0]}]}],
     "channels": [{"srcbuff": "i", "dstbuff": "s", "type": "proxy", "connectedTo": [1]}]},
    {"id": 1, "inputChunks": 1, "outputChunks": 1, "scratchChunks": 2, "chunkGroups": 1,
     "threadblocks": [{"id": 0,
        "ops": [
          {"name": "pwsf", "o_buff": {"src": "i", "dst": "s"}, "o_cids": [{"id": 0, "off": 1}],
           "srcs": [{"buff": "i", "off": 0}], "ctype": "proxy", "cnt": 1},
          {"name": "wait", "i_buff": {"src": "i", "dst": "s"}, "i_cids": [{"id": 0, "off": 0}], "ctype": "proxy", "cnt": 1},
          {"name": "nop", "deps": [{"tb": 0, "step": 1}]},
          {"name": "copy", "srcbuff": "s", "srcoff": 1, "dstbuff": "o", "dstoff": 0, "ctype": "none", "cnt": 1}],
        "channels": [{"src": "i", "dst": "s", "ctype": "proxy", "cids": [0]}]}],
     "channels": [{"srcbuff": "i", "dstbuff": "s", "type": "proxy", "connectedTo": [0]}]}
  ]
}`

func TestSendRecv07Exact(t *testing.T) {
	got, ds := mustParse(t, sendRecv07)
	if len(ds) != 0 {
		t.Errorf("diagnostics: %v", ds)
	}
	b := New(ir.SendRecv, 2, 1).Name("sr").Threads(1024).SliceBytes(Unsliced).Meta("format", "mscclpp-json").Meta("mscclpp.dialect", "v0.7")
	b.Connect(0, 1, ir.PortChannel, 0, 0)
	for r := 0; r < 2; r++ {
		b.Rank(r).Chunks(1, 1, 2).PrimTB().
			Copy(1, I(0), Remote(S(1), 0)).Signal(0).Flush(0).
			Wait(0).Nop().
			Copy(1, S(1), O(0))
	}
	if d := Diff(b.Build(), got); d != "" {
		t.Errorf("program (-want +got):\n%s", d)
	}
	// The three ops of pwsf keep the position of the pwsf op (line 7).
	for i, want := range []int32{7, 7, 7, 9, 10, 11} {
		if p := got.Ranks[0].TBs[0].Ops[i].Pos; p.Line != want {
			t.Errorf("op %d at %v, want line %d", i, p, want)
		}
	}
}

// TestChannelPairing07 pins MSCCL++'s pairing: per peer and channel type,
// the k-th channel of one side meets the k-th of the other, in the order
// of the channel lists, whatever the buffer keys; the side with fewer gets
// unused channels appended.
func TestChannelPairing07(t *testing.T) {
	src := `{"name": "p", "collective": "allreduce", "protocol": "Simple", "inplace": true, "gpus": [
    {"id": 0, "inputChunks": 2, "outputChunks": 0, "scratchChunks": 2, "chunkGroups": 1,
     "channels": [
        {"srcbuff": "i", "dstbuff": "s", "type": "sm", "connectedTo": [1, 1]},
        {"srcbuff": "i", "dstbuff": "o", "type": "memory", "connectedTo": [1]},
        {"srcbuff": "o", "dstbuff": "o", "type": "port", "connectedTo": [1]}],
     "threadblocks": [{"id": 0, "channels": [{"src": "i", "dst": "o", "ctype": "sm", "cids": [0]},
                                             {"src": "i", "dst": "s", "ctype": "sm", "cids": [1, 0]}],
        "ops": [{"name": "put", "o_buff": {"src": "i", "dst": "o"}, "o_cids": [{"id": 0, "off": 1}],
                 "srcs": [{"buff": "i", "off": 0}], "ctype": "sm", "cnt": 1},
                {"name": "signal", "o_buff": {"src": "i", "dst": "s"}, "o_cids": [{"id": 0, "off": 0}, {"id": 1, "off": 0}], "ctype": "sm"}]}]},
    {"id": 1, "inputChunks": 2, "outputChunks": 0, "scratchChunks": 2, "chunkGroups": 1,
     "channels": [
        {"srcbuff": "s", "dstbuff": "i", "type": "sm", "connectedTo": [0]},
        {"srcbuff": "i", "dstbuff": "i", "type": "sm", "connectedTo": [0, 0, 0]}],
     "threadblocks": []}]}`
	got, _ := mustParse(t, src)
	type end struct {
		Peer, PeerChannel int
		Type              ir.ChannelType
	}
	ends := func(r int) []end {
		var out []end
		for _, c := range got.Ranks[r].Channels {
			out = append(out, end{c.Peer, c.PeerChannel, c.Type})
		}
		return out
	}
	// Rank 0: memory (i→s)(i→s)(i→o), one filled memory end, then port.
	want0 := []end{{1, 0, ir.MemoryChannel}, {1, 1, ir.MemoryChannel}, {1, 2, ir.MemoryChannel}, {1, 3, ir.MemoryChannel}, {1, 4, ir.PortChannel}}
	// Rank 1: memory (s→i)(i→i)(i→i)(i→i), then one filled port end.
	want1 := []end{{0, 0, ir.MemoryChannel}, {0, 1, ir.MemoryChannel}, {0, 2, ir.MemoryChannel}, {0, 3, ir.MemoryChannel}, {0, 4, ir.PortChannel}}
	if d := cmp.Diff(want0, ends(0)); d != "" {
		t.Errorf("rank 0 ends (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want1, ends(1)); d != "" {
		t.Errorf("rank 1 ends (-want +got):\n%s", d)
	}
	// The put goes through the (i→o) channel, flat memory index 2; the
	// signal's ids 0 and 1 are the threadblock's (i→s) cids 1 and 0.
	ops := got.Ranks[0].TBs[0].Ops
	if d := cmp.Diff([]ir.Op{
		{Code: ir.OpCopy, Srcs: []ir.Ref{I(0)}, Dsts: []ir.Ref{Remote(O(1), 2)}, Count: 1},
		{Code: ir.OpSignal, Chans: []int{1, 0}},
	}, ops, CmpOpts...); d != "" {
		t.Errorf("ops (-want +got):\n%s", d)
	}
}

// A v0.8+ allgather on two ranks over LL packets, in place: rank r puts
// its block into the peer's scratch as packets, the peer unpacks it into
// the output.
const allGather08 = `{
  "name": "ag", "collective": "allgather", "protocol": "LL", "inplace": true, "reuse_resources": false,
  "num_threads_per_block": 512, "use_double_scratch_buffer": true, "buffer_alignment": 16,
  "min_message_size": 0, "max_message_size": 18446744073709551615,
  "gpus": [
    {"id": 0, "input_chunks": 1, "output_chunks": 2, "scratch_chunks": 2,
     "channels": [{"channel_type": "memory", "connected_to": [1]}],
     "remote_buffers": [{"rank": 1, "type": "s", "access_channel_types": ["memory"]}],
     "semaphores": [],
     "threadblocks": [
       {"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}],
        "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
        "ops": [{"name": "ppkt", "src_buff": [{"type": "o", "index": 0, "size": 1}],
                 "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory"}]},
       {"id": 1, "channels": [], "remote_buffer_refs": [],
        "ops": [{"name": "upkt", "src_buff": [{"type": "s", "index": 1, "size": 1}],
                 "dst_buff": [{"type": "o", "index": 1, "size": 1}]}]}]},
    {"id": 1, "input_chunks": 1, "output_chunks": 2, "scratch_chunks": 2,
     "channels": [{"channel_type": "memory", "connected_to": [0]}],
     "remote_buffers": [{"rank": 0, "type": "s", "access_channel_types": ["memory"]}],
     "semaphores": [],
     "threadblocks": [
       {"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}],
        "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
        "ops": [{"name": "cpkt", "src_buff": [{"type": "o", "index": 1, "size": 1}],
                 "dst_buff": [{"type": "s", "index": 0, "size": 1}]},
                {"name": "rppkt", "src_buff": [{"type": "s", "index": 0, "size": 1}],
                 "dst_buff": [{"buffer_id": 0, "index": 1, "size": 1}], "channel_type": "memory"},
                {"name": "upkt", "src_buff": [{"type": "s", "index": 0, "size": 1}],
                 "dst_buff": [{"type": "o", "index": 0, "size": 1}]}]}]}
  ]
}`

func TestAllGather08Exact(t *testing.T) {
	got, ds := mustParse(t, allGather08)
	if len(ds) != 0 {
		t.Errorf("diagnostics: %v", ds)
	}
	b := New(ir.AllGather, 2, 1).Name("ag").Protocol(ir.LL).Arrangements(true, false).Threads(512).SliceBytes(Unsliced).
		Meta("format", "mscclpp-json").Meta("mscclpp.dialect", "v0.8+").Meta("mscclpp.double_scratch", "true")
	b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	r0 := b.Rank(0).Chunks(1, 2, 2)
	r0.PrimTB().Copy(1, O(0), Packet(Remote(S(0), 0)))
	r0.PrimTB().Copy(1, Packet(S(1)), O(1))
	b.Rank(1).Chunks(1, 2, 2).PrimTB().
		Copy(1, O(1), Packet(S(0))).
		Copy(1, Packet(S(0)), Packet(Remote(S(1), 0))).
		Copy(1, Packet(S(0)), O(0))
	if d := Diff(b.Build(), got); d != "" {
		t.Errorf("program (-want +got):\n%s", d)
	}
}

// v08 builds a one-or-two-rank v0.8+ plan from gpu JSON bodies.
func v08(extra string, gpus ...string) string {
	var b strings.Builder
	b.WriteString(`{"name": "x", "collective": "allreduce", "protocol": "Simple", "inplace": true` + extra + `, "gpus": [`)
	for i, g := range gpus {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(g)
	}
	b.WriteString("]}")
	return b.String()
}

// gpu08 is a gpu with 4 input chunks, 4 scratch chunks, the given channel
// and remote-buffer declarations and threadblocks.
func gpu08(id int, channels, remote, tbs string) string {
	return `{"id": ` + itoa(id) + `, "input_chunks": 4, "output_chunks": 0, "scratch_chunks": 4, "channels": [` + channels +
		`], "remote_buffers": [` + remote + `], "threadblocks": [` + tbs + `]}`
}

func TestPortPutsAndReductions08(t *testing.T) {
	tb0 := `{"id": 0, "channels": [{"channel_type": "port", "channel_ids": [0]}, {"channel_type": "memory", "channel_ids": [0]}],
	  "remote_buffer_refs": [{"access_channel_type": "port", "remote_buffer_ids": [0]}, {"access_channel_type": "memory", "remote_buffer_ids": [1]}],
	  "ops": [
	    {"name": "pwsf", "src_buff": [{"type": "i", "index": 0, "size": 2}], "dst_buff": [{"buffer_id": 0, "index": 2, "size": 2}], "channel_type": "port", "channel_ids": [0]},
	    {"name": "wait", "channel_ids": [0], "channel_type": "port"},
	    {"name": "rres", "src_buff": [{"type": "i", "index": 0, "size": 1}, {"buffer_id": 0, "index": 0, "size": 1}],
	                     "dst_buff": [{"type": "i", "index": 0, "size": 1}, {"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory", "reduce_op": "sum"},
	    {"name": "res", "src_buff": [{"type": "i", "index": 1, "size": 1}, {"type": "s", "index": 3, "size": 1}],
	                    "dst_buff": [{"type": "i", "index": 1, "size": 1}, {"buffer_id": 0, "index": 1, "size": 1}], "channel_type": "memory"},
	    {"name": "barrier", "barrier_id": 0, "num_threadblocks": 1}]}`
	g0 := gpu08(0, `{"channel_type": "port", "connected_to": [1]}, {"channel_type": "memory", "connected_to": [1]}`,
		`{"rank": 1, "type": "s", "access_channel_types": ["port"]}, {"rank": 1, "type": "i", "access_channel_types": ["memory"]}`, tb0)
	g1 := gpu08(1, `{"channel_type": "memory", "connected_to": [0]}, {"channel_type": "port", "connected_to": [0]}`, ``, ``)
	got, ds := mustParse(t, v08("", g0, g1))
	if len(ds) != 0 {
		t.Errorf("diagnostics %v", ds)
	}
	// Rank 0's IR channels: memory first (index 0), port second (index 1).
	want := []ir.Op{
		{Code: ir.OpCopy, Srcs: []ir.Ref{I(0)}, Dsts: []ir.Ref{Remote(S(2), 1)}, Count: 2},
		{Code: ir.OpSignal, Chans: []int{1}},
		{Code: ir.OpFlush, Chans: []int{1}},
		{Code: ir.OpWait, Chans: []int{1}},
		{Code: ir.OpReduce, Srcs: []ir.Ref{I(0), Remote(I(0), 0)}, Dsts: []ir.Ref{I(0), Remote(I(0), 0)}, Count: 1},
		{Code: ir.OpReduce, Srcs: []ir.Ref{I(1), S(3)}, Dsts: []ir.Ref{I(1), Remote(I(1), 0)}, Count: 1},
		{Code: ir.OpBarrier, Barrier: 0, BarrierTBs: 1},
	}
	if d := cmp.Diff(want, got.Ranks[0].TBs[0].Ops, CmpOpts...); d != "" {
		t.Errorf("ops (-want +got):\n%s", d)
	}
	if c := got.Ranks[1].Channels; len(c) != 2 || c[0].PeerChannel != 0 || c[1].PeerChannel != 1 || c[1].Type != ir.PortChannel {
		t.Errorf("rank 1 channels %+v", c)
	}
}

// TestDataChannelAdded: a memory remote buffer of a rank no memory channel
// reaches gets a data-only channel pair.
func TestDataChannelAdded(t *testing.T) {
	tb := `{"id": 0, "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
	  "ops": [{"name": "put", "src_buff": [{"type": "i", "index": 0, "size": 1}], "dst_buff": [{"buffer_id": 0, "index": 1, "size": 1}], "channel_type": "memory"}]}`
	src := v08("", gpu08(0, ``, `{"rank": 1, "type": "s", "access_channel_types": ["memory"]}`, tb), gpu08(1, ``, ``, ``))
	got, ds := mustParse(t, src)
	if d := cmp.Diff([]diag.Code{diag.ImportNote}, codesOf(ds, diag.Note)); d != "" {
		t.Errorf("notes: %v", ds)
	}
	if c := got.Ranks[0].Channels; len(c) != 1 || c[0].Peer != 1 || c[0].PeerChannel != 0 || got.Ranks[1].Channels[0].PeerChannel != 0 {
		t.Errorf("channels %+v / %+v", c, got.Ranks[1].Channels)
	}
	if op := got.Ranks[0].TBs[0].Ops[0]; op.Dsts[0] != Remote(S(1), 0) {
		t.Errorf("op %+v", op)
	}
}

func TestQuirkWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		warn      string
	}{{
		name: "pws on memory channels does not signal",
		src: v08("", gpu08(0, `{"channel_type": "memory", "connected_to": [1]}`, `{"rank": 1, "type": "s", "access_channel_types": ["memory"]}`,
			`{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}], "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
			 "ops": [{"name": "pws", "src_buff": [{"type": "i", "index": 0, "size": 1}], "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory", "channel_ids": [0]}]}`),
			gpu08(1, `{"channel_type": "memory", "connected_to": [0]}`, ``, ``)),
		warn: "puts without signalling",
	}, {
		name: "get swaps offsets in MSCCL++",
		src: v08("", gpu08(0, `{"channel_type": "memory", "connected_to": [1]}`, `{"rank": 1, "type": "i", "access_channel_types": ["memory"]}`,
			`{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}], "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
			 "ops": [{"name": "get", "src_buff": [{"buffer_id": 0, "index": 2, "size": 1}], "dst_buff": [{"type": "s", "index": 0, "size": 1}], "channel_type": "memory"}]}`),
			gpu08(1, `{"channel_type": "memory", "connected_to": [0]}`, ``, ``)),
		warn: "swaps the two offsets",
	}, {
		name: "relaxed signal",
		src: v08("", gpu08(0, `{"channel_type": "memory", "connected_to": [1]}`, ``,
			`{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}], "ops": [{"name": "rlxsignal", "channel_ids": [0], "channel_type": "memory"}]}`),
			gpu08(1, `{"channel_type": "memory", "connected_to": [0]}`, ``,
				`{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}], "ops": [{"name": "rlxwait", "channel_ids": [0], "channel_type": "memory"}]}`)),
		warn: "relaxed memory order",
	}, {
		name: "v0.7 nop deps across threadblocks",
		src:  strings.Replace(sendRecv07, `{"name": "nop", "deps": [{"tb": 0, "step": 1}]}`, `{"name": "nop", "deps": [{"tb": 1, "step": 1}]}`, 1),
		warn: "not enforced by MSCCL++ v0.7",
	}, {
		name: "LL128",
		src:  strings.Replace(sendRecv07, `"Simple"`, `"LL128"`, 1),
		warn: "LL128 is not supported",
	}, {
		name: "unknown key",
		src:  strings.Replace(sendRecv07, `"inplace": false,`, `"inplace": false, "colour": "red",`, 1),
		warn: `unknown key "colour"`,
	}, {
		name: "unknown v0.8 gpu key",
		src: v08("", strings.Replace(gpu08(0, `{"channel_type": "memory", "connected_to": [1]}`, ``,
			`{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}], "ops": [{"name": "signal", "channel_ids": [0], "channel_type": "memory"}]}`),
			`"input_chunks": 4,`, `"input_chunks": 4, "colour": "red",`, 1),
			gpu08(1, `{"channel_type": "memory", "connected_to": [0]}`, ``,
				`{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}], "ops": [{"name": "wait", "channel_ids": [0], "channel_type": "memory"}]}`)),
		warn: `unknown key "colour" in a gpu`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, ds := mustParse(t, tc.src)
			found := false
			for _, d := range ds {
				if d.Severity == diag.Warning && strings.Contains(d.Msg, tc.warn) {
					found = true
					if d.Line < 1 || d.Col < 1 {
						t.Errorf("warning without position: %v", d)
					}
				}
			}
			if !found {
				t.Errorf("no warning containing %q in %v", tc.warn, ds)
			}
		})
	}
}

func TestPipeline(t *testing.T) {
	pipe := func(unit, chunks int, inner string) string {
		return `{"name": "pipeline", "iter_context": {"unit_size": ` + itoa(unit) + `, "num_chunks": ` + itoa(chunks) + `}, "ops": [` + inner + `]}`
	}
	tbOf := func(ops string) string {
		return `{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]}], "ops": [` + ops + `]}`
	}
	inner := `{"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": 1}], "dst_buff": [{"type": "s", "index": 0, "size": 1}]},
	          {"name": "signal", "channel_ids": [0], "channel_type": "memory"}, {"name": "wait", "channel_ids": [0], "channel_type": "memory"}`
	ch := func(peer int) string { return `{"channel_type": "memory", "connected_to": [` + itoa(peer) + `]}` }
	t.Run("whole program is one pipeline", func(t *testing.T) {
		got, ds := mustParse(t, v08("", gpu08(0, ch(1), ``, tbOf(pipe(1<<20, 1, inner))), gpu08(1, ch(0), ``, tbOf(pipe(1<<20, 1, inner)))))
		if got.SliceBytes != 1<<20 || got.NumOps() != 6 || len(codesOf(ds, diag.Note)) != 1 {
			t.Errorf("SliceBytes %d ops %d diags %v", got.SliceBytes, got.NumOps(), ds)
		}
		if op := got.Ranks[1].TBs[0].Ops[0]; op.Code != ir.OpCopy || op.Count != 1 {
			t.Errorf("first inner op %+v", op)
		}
	})
	t.Run("num_chunks divides unit_size", func(t *testing.T) {
		in2 := strings.ReplaceAll(inner, `"size": 1`, `"size": 2`)
		got, _ := mustParse(t, v08("", gpu08(0, ch(1), ``, tbOf(pipe(1000, 2, in2))), gpu08(1, ch(0), ``, tbOf(pipe(1000, 2, in2)))))
		if got.SliceBytes != 500 {
			t.Errorf("SliceBytes %d, want 500", got.SliceBytes)
		}
	})
	for _, tc := range []struct{ name, src, msg string }{
		{"mixed with other ops", v08("", gpu08(0, ch(1), ``, tbOf(pipe(1024, 1, inner)+`, {"name": "nop"}`)), gpu08(1, ch(0), ``, tbOf(pipe(1024, 1, inner)))),
			"mixes a pipeline op with other ops"},
		{"other threadblock outside", v08("", gpu08(0, ch(1), ``, tbOf(`{"name": "nop"}`)), gpu08(1, ch(0), ``, tbOf(pipe(1024, 1, inner)))),
			"outside the pipeline"},
		{"two iter contexts", v08("", gpu08(0, ch(1), ``, tbOf(pipe(1024, 1, inner))), gpu08(1, ch(0), ``, tbOf(pipe(2048, 1, inner)))),
			"different iter_context"},
		{"LL", strings.Replace(v08("", gpu08(0, ch(1), ``, tbOf(pipe(1024, 1, inner))), gpu08(1, ch(0), ``, tbOf(pipe(1024, 1, inner)))), `"Simple"`, `"LL"`, 1),
			"LL packet ops"},
		{"count is not num_chunks", v08("", gpu08(0, ch(1), ``, tbOf(pipe(1024, 2, inner))), gpu08(1, ch(0), ``, tbOf(pipe(1024, 2, inner)))),
			"moves 1 chunks but iter_context.num_chunks is 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codes := []diag.Code{diag.Unsupported}
			if strings.Contains(tc.msg, "moves") { // reported for each rank
				codes = append(codes, diag.Unsupported)
			}
			wantErr(t, tc.src, tc.msg, codes...)
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestUnsupported(t *testing.T) {
	ch := `{"channel_type": "memory", "connected_to": [1]}`
	ch1 := `{"channel_type": "memory", "connected_to": [0]}`
	for _, tc := range []struct{ name, src, msg string }{
		{"v0.7 nvls channel", strings.Replace(sendRecv07, `"channels": [{"srcbuff": "i", "dstbuff": "s", "type": "proxy", "connectedTo": [1]}]`,
			`"channels": [{"buff": "i", "type": "nvls", "rankGroups": [{"size": 2, "ranks": [0, 1]}]}]`, 1), "unsupported: nvls"},
		{"v0.7 glres", strings.Replace(sendRecv07, `{"name": "nop", "deps": [{"tb": 0, "step": 1}]}`, `{"name": "glres", "ctype": "nvls"}`, 1), "unsupported: nvls"},
		{"v0.8 switch channel", v08("", gpu08(0, ch+`, {"channel_type": "switch", "buffer_type": "i", "rank_groups": [{"size": 2, "ranks": [0, 1]}]}`, ``, ``),
			gpu08(1, ch1, ``, ``)), "unsupported: nvls"},
		{"v0.8 gstore", v08("", gpu08(0, ch, ``, `{"id": 0, "ops": [{"name": "gstore"}]}`), gpu08(1, ch1, ``, ``)), "unsupported: nvls"},
		{"semaphores", v08("", gpu08(0, ch, ``, `{"id": 0, "ops": [{"name": "sem_acquire", "semaphore_ids": [0]}]}`), gpu08(1, ch1, ``, ``)),
			"rank-local counting semaphore"},
		{"thread-block groups", v08("", gpu08(0, ch, ``, `{"id": 0, "ops": [{"name": "copy", "tbg_info": {"tb_id": 0, "tbg_size": 2},
			"src_buff": [{"type": "i", "index": 0, "size": 1}], "dst_buff": [{"type": "s", "index": 0, "size": 1}]}]}`), gpu08(1, ch1, ``, ``)),
			"tbg_info splits one op over 2 threadblocks"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.src, tc.msg, diag.Unsupported) })
	}
}

func TestGeometryAndWindow(t *testing.T) {
	mk := func(coll string, in, out int, extra string) string {
		g := func(id int) string {
			return `{"id": ` + itoa(id) + `, "input_chunks": ` + itoa(in) + `, "output_chunks": ` + itoa(out) +
				`, "scratch_chunks": 0, "channels": [], "threadblocks": []}`
		}
		return `{"name": "g", "collective": "` + coll + `", "protocol": "Simple", "inplace": false` + extra + `, "gpus": [` + g(0) + `, ` + g(1) + `]}`
	}
	for _, tc := range []struct {
		name      string
		src       string
		c, lo, hi int64
	}{
		{"allgather 1 in 2 out", mk("allgather", 1, 2, ""), 1, 0, 0},
		{"reducescatter 4 in 2 out", mk("reducescatter", 4, 2, ""), 2, 0, 0},
		{"allreduce output only", mk("allreduce", 0, 3, ""), 3, 0, 0},
		{"v0.8 window inclusive", mk("allreduce", 2, 2, `, "min_message_size": 16, "max_message_size": 1024`), 2, 16, 1024},
		{"v0.7 window exclusive", strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(
			mk("allreduce", 2, 2, `, "min_message_size": 16, "max_message_size": 1024`), "input_chunks", "inputChunks"),
			"output_chunks", "outputChunks"), `"scratch_chunks": 0`, `"scratchChunks": 0, "chunkGroups": 1`), 2, 16, 1023},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := mustParse(t, tc.src)
			if p.ChunksPerBlock != tc.c || p.MinBytes != tc.lo || p.MaxBytes != tc.hi {
				t.Errorf("C=%d window [%d, %d], want C=%d [%d, %d]", p.ChunksPerBlock, p.MinBytes, p.MaxBytes, tc.c, tc.lo, tc.hi)
			}
		})
	}
	for _, tc := range []struct{ name, src, msg string }{
		{"chunk sizes differ", mk("allgather", 1, 4, ""), "make chunks of count/1 elements, but 4 output chunks"},
		{"not a multiple", mk("reducescatter", 3, 1, ""), "not a multiple of the 2 blocks"},
		{"no chunks", mk("allreduce", 0, 0, ""), "neither input nor output chunks"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.src, tc.msg, diag.BadGeometry) })
	}
}

// posOf returns the 1-based line and column of the first occurrence of
// needle in src.
func posOf(src, needle string) (int, int) {
	i := strings.Index(src, needle)
	if i < 0 {
		panic("needle not found: " + needle)
	}
	line := strings.Count(src[:i], "\n") + 1
	return line, i - strings.LastIndex(src[:i], "\n")
}

func TestErrors(t *testing.T) {
	unknownOp := strings.Replace(sendRecv07, `"name": "wait"`, `"name": "jump"`, 1)
	badCid := strings.Replace(sendRecv07, `"i_cids": [{"id": 0, "off": 0}]`, `"i_cids": [{"id": 3, "off": 0}]`, 1)
	self := strings.Replace(sendRecv07, `"connectedTo": [1]`, `"connectedTo": [0]`, 1)
	tbid := strings.Replace(sendRecv07, `"threadblocks": [{"id": 0,`, `"threadblocks": [{"id": 1,`, 1)
	coll := strings.Replace(sendRecv07, `"sendrecv"`, `"sendrecvx"`, 1)
	typ := strings.Replace(sendRecv07, `"inplace": false`, `"inplace": 0`, 1)
	at := func(src, needle string, skip int) [2]int {
		l, c := posOf(src, needle)
		return [2]int{l, c + skip}
	}
	for _, tc := range []struct {
		name, src, msg string
		codes          []diag.Code
		pos            [2]int
	}{
		{"empty", "", "malformed JSON", []diag.Code{diag.Syntax}, [2]int{1, 1}},
		{"syntax", "{\n  \"name\": \"x\",\n  \"gpus\": [1 2]\n}", "malformed JSON", []diag.Code{diag.Syntax}, [2]int{3, 14}},
		{"trailing", `{"gpus": []} {}`, "data after the top-level value", []diag.Code{diag.Syntax}, [2]int{1, 14}},
		{"duplicate key", `{"name": "a", "name": "b"}`, `duplicate key "name"`, []diag.Code{diag.BadValue}, [2]int{1, 15}},
		{"too deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), "nesting", []diag.Code{diag.TooLarge}, [2]int{1, 65}},
		{"not an object", `[]`, "want an object", []diag.Code{diag.BadValue}, [2]int{1, 1}},
		{"no gpus", `{"name": "x"}`, `missing key "gpus"`, []diag.Code{diag.MissingField}, [2]int{1, 1}},
		{"dialect", `{"gpus": [{"id": 0}]}`, "cannot tell the plan dialect", []diag.Code{diag.BadVersion}, [2]int{1, 11}},
		{"unknown op", unknownOp, `unknown v0.7 op "jump"`, []diag.Code{diag.UnknownOp}, at(unknownOp, `"jump"`, 0)},
		{"bad cid", badCid, "i_cids id 3", []diag.Code{diag.BadChannel}, at(badCid, `"id": 3`, 6)},
		{"self channel", self, "connects a channel to itself", []diag.Code{diag.BadChannel}, at(self, `"connectedTo": [0]`, 16)},
		{"tb id", tbid, "has id 1", []diag.Code{diag.DuplicateID}, at(tbid, `"id": 1,`, 6)},
		{"bad collective", coll, "unknown collective", []diag.Code{diag.UnknownCollective}, at(coll, `"sendrecvx"`, 0)},
		{"wrong type", typ, "want true or false", []diag.Code{diag.BadValue}, at(typ, `"inplace": 0`, 11)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := wantErr(t, tc.src, tc.msg, tc.codes...)
			for _, d := range ds {
				if d.Severity == diag.Error && [2]int{d.Line, d.Col} != tc.pos {
					t.Errorf("at %d:%d, want %d:%d: %v", d.Line, d.Col, tc.pos[0], tc.pos[1], d)
				}
			}
		})
	}
}

func TestInputLimit(t *testing.T) {
	defer func(n int) { inputLimit = n }(inputLimit)
	inputLimit = 10
	wantErr(t, `{"gpus": []}`, "over the limit", diag.TooLarge)
}
