package cli

import (
	"strconv"

	"github.com/spf13/pflag"

	"github.com/theseus-ccl/theseus/runtime/env"
)

// BytesVar defines a flag holding a size in bytes: a number with an
// optional K, M or G suffix (KB/KiB and so on, powers of 1024), as the
// environment sizes and theseus-bench's -b/-e take it (env.ParseSize). A
// negative or malformed value is a usage error from flag parsing.
func BytesVar(f *pflag.FlagSet, p *int64, name string, value int64, usage string) {
	*p = value
	f.Var((*bytesValue)(p), name, usage)
}

type bytesValue int64

func (b *bytesValue) Set(s string) error {
	n, err := env.ParseSize(s)
	if err != nil {
		return err
	}
	*b = bytesValue(n)
	return nil
}

func (b *bytesValue) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *bytesValue) Type() string { return "bytes" }
