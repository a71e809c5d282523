package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// The output formats every printer registry may offer.
const (
	FormatText = "text" // for people: one finding or case per line
	FormatJSON = "json" // for machines: one JSON document, two-space indent
)

// Printer writes v to w in one output format.
type Printer[T any] func(w io.Writer, v T) error

// Printers is a registry of the output formats of one kind of result:
// a name maps to a Printer. Names are kept in registration order, which is
// the order --help lists them in.
type Printers[T any] struct {
	names []string
	docs  map[string]string
	m     map[string]Printer[T]
}

// NewPrinters returns an empty registry.
func NewPrinters[T any]() *Printers[T] {
	return &Printers[T]{docs: map[string]string{}, m: map[string]Printer[T]{}}
}

// Register adds format name with a one-line description. Registering a
// name twice panics (a programming error).
func (p *Printers[T]) Register(name, doc string, f Printer[T]) *Printers[T] {
	if _, dup := p.m[name]; dup {
		panic("cli: output format registered twice: " + name)
	}
	p.names = append(p.names, name)
	p.docs[name] = doc
	p.m[name] = f
	return p
}

// Names lists the registered formats in registration order.
func (p *Printers[T]) Names() []string { return append([]string(nil), p.names...) }

// Help describes the formats for a flag's usage text.
func (p *Printers[T]) Help() string {
	var parts []string
	for _, n := range p.names {
		parts = append(parts, fmt.Sprintf("%s (%s)", n, p.docs[n]))
	}
	return strings.Join(parts, ", ")
}

// Lookup returns the printer of format name, or a usage error naming the
// formats there are.
func (p *Printers[T]) Lookup(name string) (Printer[T], error) {
	if f, ok := p.m[name]; ok {
		return f, nil
	}
	return nil, Usagef("unknown output format %q (formats: %s)", name, strings.Join(p.names, ", "))
}

// OutputFlags are --format NAME and its shorthand --json, shared by every
// command that prints a result in more than one format.
type OutputFlags struct {
	Format string
	JSON   bool
	cmd    *cobra.Command
}

// AddOutputFlags registers --format (default text) and --json on cmd,
// listing the formats of reg in the help text.
func AddOutputFlags[T any](cmd *cobra.Command, reg *Printers[T]) *OutputFlags {
	o := &OutputFlags{cmd: cmd}
	cmd.Flags().StringVar(&o.Format, "format", FormatText, "output format: "+reg.Help())
	cmd.Flags().BoolVar(&o.JSON, "json", false, "shorthand for --format=json")
	return o
}

// Name returns the chosen format: json under --json, else --format. Asking
// for two different formats (--json with --format text given too) is a
// usage error.
func (o *OutputFlags) Name() (string, error) {
	if o.JSON {
		given := o.cmd != nil && o.cmd.Flags().Changed("format")
		if o.Format != FormatJSON && (given || o.Format != FormatText) {
			return "", Usagef("--json conflicts with --format=%s", o.Format)
		}
		return FormatJSON, nil
	}
	return o.Format, nil
}

// Resolve returns the printer of the chosen format in reg.
func Resolve[T any](o *OutputFlags, reg *Printers[T]) (Printer[T], error) {
	name, err := o.Name()
	if err != nil {
		return nil, err
	}
	return reg.Lookup(name)
}
