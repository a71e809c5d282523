package abi

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rawConfig lays out an ncclConfig_t as a client of NCCL version ver
// would, with size bytes and every field after the header at fill.
func rawConfig(size int, ver uint32, blocking int32, fill int32) []byte {
	b := make([]byte, max(size, 72))
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(size))
	le.PutUint32(b[8:], ConfigMagic)
	le.PutUint32(b[12:], ver)
	le.PutUint32(b[16:], uint32(blocking))
	for _, off := range []int{20, 24, 28, 40, 44, 56, 60, 64, 68} {
		le.PutUint32(b[off:], uint32(fill))
	}
	return b[:ReadLen(uint64(size))]
}

func TestDecodeConfig(t *testing.T) {
	undef := int32(UndefInt)
	cases := []struct {
		name string
		b    []byte
		want Config
		err  Result
	}{
		{"2.25 initializer", rawConfig(48, 22501, undef, undef),
			Config{Size: 48, Magic: ConfigMagic, Version: 22501, Blocking: 1, CGAClusterSize: undef, MinCTAs: undef, MaxCTAs: undef, SplitShare: undef, TrafficClass: undef}, Success},
		{"non-blocking", rawConfig(48, 22501, 0, undef),
			Config{Size: 48, Magic: ConfigMagic, Version: 22501, Blocking: 0, CGAClusterSize: undef, MinCTAs: undef, MaxCTAs: undef, SplitShare: undef, TrafficClass: undef}, Success},
		// A 2.25 client's bytes 44..47 are padding: never read as trafficClass.
		{"2.25 padding ignored", rawConfig(48, 22501, 1, 3),
			Config{Size: 48, Magic: ConfigMagic, Version: 22501, Blocking: 1, CGAClusterSize: 3, MinCTAs: 3, MaxCTAs: 3, SplitShare: 3, TrafficClass: undef}, Success},
		{"2.27 client, 72 bytes", rawConfig(72, 22703, 1, 2),
			Config{Size: 72, Magic: ConfigMagic, Version: 22703, Blocking: 1, CGAClusterSize: 2, MinCTAs: 2, MaxCTAs: 2, SplitShare: 2, TrafficClass: 2}, Success},
		{"2.16 client, 40 bytes", rawConfig(40, 21605, 0, 4),
			Config{Size: 40, Magic: ConfigMagic, Version: 21605, Blocking: 0, CGAClusterSize: 4, MinCTAs: 4, MaxCTAs: 4, SplitShare: undef, TrafficClass: undef}, Success},
		{"bad magic", func() []byte { b := rawConfig(48, 22501, 1, undef); b[8] = 0; return b }(), Config{}, InvalidArgument},
		{"size below header", rawConfig(8, 22501, 1, undef), Config{}, InvalidArgument},
		{"blocking 2", rawConfig(48, 22501, 2, undef), Config{}, InvalidArgument},
		{"negative CTAs", rawConfig(48, 22501, 1, -3), Config{}, InvalidArgument},
		{"short buffer", []byte{1, 2, 3}, Config{}, InvalidArgument},
	}
	for _, c := range cases {
		got, e := DecodeConfig(c.b)
		if c.err != Success {
			if e == nil || e.Result != c.err {
				t.Errorf("%s: err %v, want %v", c.name, e, c.err)
			}
			continue
		}
		if e != nil {
			t.Errorf("%s: %v", c.name, e)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	if n := ReadLen(1 << 40); n != 48 {
		t.Errorf("ReadLen(huge) = %d", n)
	}
}

// FuzzDecodeConfig: any bytes decode or fail with InvalidArgument; never
// a panic; a decoded config has blocking 0 or 1.
func FuzzDecodeConfig(f *testing.F) {
	f.Add(rawConfig(48, 22501, int32(UndefInt), int32(UndefInt)))
	f.Add(rawConfig(72, 22800, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, e := DecodeConfig(b)
		if e != nil {
			if e.Result != InvalidArgument {
				t.Fatalf("result %v", e.Result)
			}
			return
		}
		if c.Blocking != 0 && c.Blocking != 1 {
			t.Fatalf("blocking %d", c.Blocking)
		}
		if c.Magic != ConfigMagic || c.Size < ConfigHeaderSize {
			t.Fatalf("accepted %+v", c)
		}
	})
}
