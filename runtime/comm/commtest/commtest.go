// Package commtest builds selection contexts for tests and tools out of the
// schedule generators (compiler/gen), written as Theseus schedule JSON
// (compiler/frontends/schedjson.Format) with their manifest lines
// (docs/selection-context.md). Until the embedded default context exists,
// runtime tests use Standard.
package commtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
)

// Sched is one schedule entry: a generator's program and its policy.
type Sched struct {
	Algo     string
	Coll     ir.Collective
	Protocol ir.Protocol
	Channels int
	Order    []int
	Root     int
	// Manifest fields (empty: absent).
	MinBytes, MaxBytes int64
	Usable, Preference string
	// Replaces is the index in the spec list of the entry this one
	// replaces, or -1 (0 means entry 0; use -1 for none).
	Replaces int
	// File overrides the generated file name.
	File string
}

// Attr is an attribute declaration line.
type Attr struct {
	Name, Type, Origin, Path string
	Default                  any
}

// DefaultAttrs are the attributes Standard's policies read: the message
// size (endo) and slow_rank (exo int, -1 when no rank is slow).
var DefaultAttrs = []Attr{
	{Name: "msgsize", Type: "int", Origin: "endo", Path: "request.messagesize"},
	{Name: "slow_rank", Type: "int", Origin: "exo", Default: -1},
}

// Write creates dir's manifests and schedule files for nranks ranks. The
// schedule ids are the positions in scheds. Errors: a generator or writer
// failure.
func Write(dir string, nranks int, attrs []Attr, scheds []Sched) error {
	return WriteSizes(dir, []int{nranks}, attrs, func(int) []Sched { return scheds })
}

// WriteSizes is Write for several communicator sizes in one context (a
// job that shrinks or splits needs the schedules of each size): the
// entries of size sizes[0] first, with the ids Write gives them, then
// those of the next size, and so on. Schedule files of later sizes are
// prefixed with "n<size>_".
func WriteSizes(dir string, sizes []int, attrs []Attr, scheds func(nranks int) []Sched) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var am strings.Builder
	for _, a := range attrs {
		m := map[string]any{"name": a.Name, "type": a.Type, "origin": a.Origin}
		if a.Path != "" {
			m["path"] = a.Path
		}
		if a.Default != nil {
			m["default"] = a.Default
		}
		line, err := json.Marshal(m)
		if err != nil {
			return err
		}
		am.Write(line)
		am.WriteByte('\n')
	}
	var sm strings.Builder
	for si, nranks := range sizes {
		if err := writeEntries(&sm, dir, nranks, scheds(nranks), si > 0); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "attribute_manifest.jsonl"), []byte(am.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "schedule_manifest.jsonl"), []byte(sm.String()), 0o644)
}

// writeEntries writes the schedule files of scheds for nranks ranks into
// dir and their manifest lines into sm; prefix names the files after the
// size.
func writeEntries(sm *strings.Builder, dir string, nranks int, scheds []Sched, prefix bool) error {
	for i, s := range scheds {
		p, err := gen.Generate(s.Algo, gen.Options{Collective: s.Coll, NRanks: nranks, Protocol: s.Protocol,
			Channels: s.Channels, Order: s.Order, Root: s.Root})
		if err != nil {
			return fmt.Errorf("entry %d (%s %v): %w", i, s.Algo, s.Coll, err)
		}
		data, err := schedjson.Format(p)
		if err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		file := s.File
		if file == "" {
			file = fmt.Sprintf("%02d_%s.json", i, p.Name)
		}
		if prefix {
			file = fmt.Sprintf("n%d_%s", nranks, file)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return err
		}
		m := map[string]any{"file": file, "collective": s.Coll.String(), "nranks": nranks, "name": p.Name}
		if s.MinBytes > 0 {
			m["min_bytes"] = s.MinBytes
		}
		if s.MaxBytes > 0 {
			m["max_bytes"] = s.MaxBytes
		}
		if s.Usable != "" {
			m["usable"] = s.Usable
		}
		if s.Preference != "" {
			m["preference"] = s.Preference
		}
		if s.Replaces >= 0 && s.Replaces < i {
			m["replaces"] = s.Replaces
		}
		line, err := json.Marshal(m)
		if err != nil {
			return err
		}
		sm.Write(line)
		sm.WriteByte('\n')
	}
	return nil
}

// Standard is a context that serves every collective for nranks ranks with
// a mix of protocols and of schedules that do and do not reach peers' user
// buffers:
//
//	allreduce      oneshot LL up to 4 KiB, oneshot Simple (remote reads of
//	               the peers' inputs) up to 256 KiB, ring Simple above;
//	               while slow_rank >= 0, a ring in reverse order (it
//	               replaces the ring) wins above 256 KiB
//	allgather      ring LL up to 4 KiB, ring Simple above
//	reducescatter  ring Simple
//	broadcast      ring Simple
//	reduce         ring LL up to 4 KiB, ring Simple above
//	alltoall       direct Simple
//	gather         direct Simple
//	scatter        direct LL up to 4 KiB, direct Simple above
func Standard(nranks int) []Sched {
	rev := make([]int, nranks)
	for i := range rev {
		rev[i] = nranks - 1 - i
	}
	const small, medium = 4096, 256 << 10
	return []Sched{
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Preference: "10", Replaces: -1},                                                                              // 0
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Order: rev, Usable: "slow_rank >= 0", Preference: "15", Replaces: 0, File: "01_ring_allreduce_reverse.json"}, // 1
		{Algo: "oneshot", Coll: ir.AllReduce, Protocol: ir.Simple, MaxBytes: medium, Preference: "20", Replaces: -1},                                                         // 2
		{Algo: "oneshot", Coll: ir.AllReduce, Protocol: ir.LL, MaxBytes: small, Preference: "30", Replaces: -1},                                                              // 3
		{Algo: "ring", Coll: ir.AllGather, Protocol: ir.Simple, Preference: "10", Replaces: -1},                                                                              // 4
		{Algo: "ring", Coll: ir.AllGather, Protocol: ir.LL, MaxBytes: small, Preference: "20", Replaces: -1},                                                                 // 5
		{Algo: "ring", Coll: ir.ReduceScatter, Protocol: ir.Simple, Replaces: -1},                                                                                            // 6
		{Algo: "ring", Coll: ir.Broadcast, Protocol: ir.Simple, Replaces: -1},                                                                                                // 7
		{Algo: "ring", Coll: ir.Reduce, Protocol: ir.Simple, Preference: "10", Replaces: -1},                                                                                 // 8
		{Algo: "ring", Coll: ir.Reduce, Protocol: ir.LL, MaxBytes: small, Preference: "20", Replaces: -1},                                                                    // 9
		{Algo: "direct", Coll: ir.AllToAll, Protocol: ir.Simple, Replaces: -1},                                                                                               // 10
		{Algo: "direct", Coll: ir.Gather, Protocol: ir.Simple, Replaces: -1},                                                                                                 // 11
		{Algo: "direct", Coll: ir.Scatter, Protocol: ir.Simple, Preference: "10", Replaces: -1},                                                                              // 12
		{Algo: "direct", Coll: ir.Scatter, Protocol: ir.LL, MaxBytes: small, Preference: "20", Replaces: -1},                                                                 // 13
	}
}

// WriteStandard writes Standard(nranks) with DefaultAttrs into dir.
func WriteStandard(dir string, nranks int) error {
	return Write(dir, nranks, DefaultAttrs, Standard(nranks))
}

// WriteStandardSizes writes Standard of every size in sizes with
// DefaultAttrs into dir (WriteSizes).
func WriteStandardSizes(dir string, sizes ...int) error {
	return WriteSizes(dir, sizes, DefaultAttrs, Standard)
}
