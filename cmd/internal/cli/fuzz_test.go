package cli

import (
	"testing"

	"github.com/theseus-ccl/theseus/diag"
)

// FuzzLoad feeds arbitrary bytes, under every file name the tools tell
// formats by, through Detect and Parse: neither may panic, every diagnostic
// must carry a documented code, and a Source without errors must hold a
// program or a bundle.
func FuzzLoad(f *testing.F) {
	f.Add("a.json", []byte(`{"version":1,"name":"x","collective":"allreduce","nranks":1,"protocol":"simple","chunks_per_block":1,"inplace":true,"outofplace":true,"ranks":[{"rank":0}]}`))
	f.Add("a.json", []byte(`{"name":"x","collective":"allreduce","protocol":"Simple","inplace":true,"gpus":[{"id":0,"inputChunks":1,"outputChunks":1,"scratchChunks":0,"chunkGroups":1,"threadblocks":[],"channels":[]}]}`))
	f.Add("a.xml", []byte(`<algo name="x" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" coll="allreduce" inplace="1" outofplace="1"><gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0"></gpu></algo>`))
	f.Add("a.tir", []byte("program \"x\" allreduce nranks=1 chunks=1 protocol=simple outofplace\nrank 0 {\n}\n"))
	f.Add("-", []byte("TSBUNDLE\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		k := Detect(name, data)
		if k == KindUnknown {
			return
		}
		s := Parse(name, k, data)
		errs := 0
		for _, d := range s.Diags {
			if _, ok := diag.Lookup(d.Code); !ok {
				t.Errorf("undocumented code %q: %s", d.Code, d)
			}
			if d.Severity == diag.Error {
				errs++
			}
		}
		if errs == 0 && s.Program == nil && s.Bundle == nil {
			t.Errorf("%v input without errors gave nothing", k)
		}
		if errs > 0 && s.Program != nil {
			t.Errorf("%v input with errors gave a program", k)
		}
	})
}
