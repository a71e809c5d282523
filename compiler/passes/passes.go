// Package passes is the schedule compiler's pipeline: one table of passes
// (Pipeline), run in order over a State by Run and Compile.
//
//	verify-input → legalize → verify → lower → bundle
//
// verify-input proves the input with every verifier check; verify then
// runs the cheap checks on the legalised program (every check with
// VerifyEach, or when verify-input is skipped).
//
// Each pass is a function of the State. Passes report problems with the
// schedule as diagnostics (State.Diags) and stop the pipeline after the
// pass that reported an error; a pass returns an error only for an internal
// failure, and a pass that panics is reported as an *InternalError naming
// it. Options turn on checking between passes (VerifyEach), stop early
// (StopAfter), print the IR after passes (PrintAfter) and time them
// (TimePasses), like the Go compiler's SSA passes and OPA's compile stages.
// docs/passes.md documents every pass.
package passes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Pass is one step of the pipeline.
type Pass struct {
	Name string
	// Run transforms or checks the State. It reports schedule problems in
	// s.Diags and returns an error only for internal failures.
	Run func(s *State) error
	// Required passes always run; the others can be turned off with
	// Options.Skip (the verifier passes).
	Required bool
	// Check marks a pass that only checks (the verifier passes):
	// VerifyEach does not re-check after it.
	Check bool
	// Summary is the one-line description `theseusc compile --help` and
	// docs/passes.md show.
	Summary string
}

// pipeline is the one table of passes, in order. Ordering constraints are
// listed in passOrder and checked at init.
var pipeline = []Pass{
	{Name: "verify-input", Run: verifyInput, Check: true,
		Summary: "prove the input (structure, sync, deadlock, races, postcondition) at the level it is written"},
	{Name: "legalize", Run: runLegalize, Required: true,
		Summary: "turn transfer ops into primitives: channel ends, credits, scratch slots (ir.md §7)"},
	{Name: "verify", Run: verifyPrimitive, Check: true,
		Summary: "check the legalised program at the primitive level (structure and sync; every check with --verify-each or when verify-input is skipped)"},
	{Name: "lower", Run: lower, Required: true,
		Summary: "lower every rank to its op table (codegen/optable)"},
	{Name: "bundle", Run: makeBundle, Required: true,
		Summary: "assemble the .tsb bundle: metadata, resource summary, tables, optional source"},
}

// passOrder lists (a before b) constraints and why; init checks them.
var passOrder = [...]struct{ a, b, why string }{
	{"verify-input", "legalize", "legalisation assumes a program whose transfers pair"},
	{"legalize", "verify", "the verifier proves the program the executors run"},
	{"legalize", "lower", "op tables hold primitive ops only"},
	{"lower", "bundle", "a bundle carries the encoded op tables"},
}

func init() {
	idx := func(n string) int {
		return slices.IndexFunc(pipeline, func(p Pass) bool { return p.Name == n })
	}
	for _, o := range passOrder {
		i, j := idx(o.a), idx(o.b)
		if i < 0 || j < 0 || i >= j {
			panic(fmt.Sprintf("passes: %s must run before %s (%s)", o.a, o.b, o.why))
		}
	}
}

// Pipeline returns a copy of the pass table, in order.
func Pipeline() []Pass { return slices.Clone(pipeline) }

// Names returns the pass names, in order.
func Names() []string {
	out := make([]string, len(pipeline))
	for i, p := range pipeline {
		out[i] = p.Name
	}
	return out
}

// Options configure a run. The zero value runs every pass, verifies with
// every check and embeds no source.
type Options struct {
	// VerifyEach checks invariants after every pass that is not itself a
	// check: the program with the cheap verifier checks (structure and
	// synchronisation, at the level the pass leaves), the op tables with
	// optable.CheckPeers after lower, and the bundle (encode, decode,
	// CheckTables) after bundle; and it makes the verify pass run every
	// check on the legalised program, not only the cheap ones. Tests turn
	// it on.
	VerifyEach bool
	// StopAfter ends the run after the named pass ("" runs them all).
	StopAfter string
	// PrintAfter prints the program in the textual IR (ir.Print) after each
	// named pass, to Out; "all" names every pass. After lower and bundle it
	// prints a summary of the tables or the bundle instead.
	PrintAfter []string
	// TimePasses records each pass's wall time (State.Timings) and prints a
	// table to Out at the end.
	TimePasses bool
	// Skip names passes not to run; only passes that are not Required can be
	// skipped (verify-input, verify).
	Skip []string
	// Verify configures the verifier passes (verify-input and verify); the
	// pass sets Level itself.
	Verify verify.Options
	// EmbedSource embeds the textual IR of the input program in the bundle.
	EmbedSource bool
	// Out receives PrintAfter and TimePasses output (os.Stderr when nil).
	Out io.Writer
}

// Timing is one pass's wall time.
type Timing struct {
	Pass    string
	Elapsed time.Duration
	Ops     int // ops of the program after the pass
}

// State is what the passes read and write.
type State struct {
	// Input is the program given to Run; passes never modify it.
	Input *ir.Program
	// Prog is the current program: Input until legalize, then the
	// legalised program.
	Prog *ir.Program
	// Raw are the per-rank op tables in their binary form
	// (codegen/optable, docs/optable.md), after lower.
	Raw [][]byte
	// Tables are Raw decoded (optable.Decode). lower fills them only when
	// the run stops after it (StopAfter "lower") or VerifyEach is set, and
	// leaves them nil otherwise: a compilation needs only the bytes, and a
	// caller decodes one rank with optable.Decode(Raw[r]) or
	// Bundle.Table(r).
	Tables []*optable.Table
	// Bundle is the result of the bundle pass.
	Bundle *bundle.Bundle
	// Diags are every pass's diagnostics, in pass order.
	Diags []diag.Diagnostic
	// Timings is filled when Options.TimePasses is set.
	Timings []Timing
	// Ran lists the passes that ran, in order.
	Ran  []string
	Opts Options
}

// ErrOptions is returned (wrapped) for options naming a pass that does not
// exist or cannot be skipped.
var ErrOptions = errors.New("passes: bad options")

// InternalError is a pass's internal failure: a returned error or a
// recovered panic (Panic true, Stack set). It names the pass.
type InternalError struct {
	Pass  string
	Err   error
	Panic bool
	Stack []byte
}

func (e *InternalError) Error() string {
	if e.Panic {
		return fmt.Sprintf("internal compiler error in pass %s: panic: %v", e.Pass, e.Err)
	}
	return fmt.Sprintf("internal compiler error in pass %s: %v", e.Pass, e.Err)
}

func (e *InternalError) Unwrap() error { return e.Err }

// Compile runs the whole pipeline on p and returns the bundle. Schedule
// problems come back as diagnostics (sorted by position, see diag.Sort);
// when they include an error, or when StopAfter stops before the bundle
// pass, the bundle is nil. The error is non-nil only for bad Options
// (ErrOptions), an internal failure (*InternalError) or a failed write to
// Options.Out. p is not modified.
func Compile(p *ir.Program, opts Options) (*bundle.Bundle, []diag.Diagnostic, error) {
	s, err := Run(p, opts)
	if s == nil {
		return nil, nil, err
	}
	return s.Bundle, s.Diags, err
}

// Run runs the pipeline and returns the final State, also when a pass
// reported errors (s.Diags) or failed (err), so callers can inspect what
// the passes before produced (for example the legalised program with
// StopAfter "legalize"). It returns a nil State only for bad Options.
func Run(p *ir.Program, opts Options) (*State, error) {
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	if opts.Out == nil {
		opts.Out = os.Stderr
	}
	s := &State{Input: p, Prog: p, Opts: opts}
	var err error
	for _, ps := range pipeline {
		if slices.Contains(opts.Skip, ps.Name) {
			continue
		}
		if err = s.run(ps); err != nil {
			break
		}
		if hasErrors(s.Diags) || ps.Name == opts.StopAfter {
			break
		}
	}
	diag.Sort(s.Diags)
	if opts.TimePasses && err == nil {
		err = s.printTimings()
	}
	return s, err
}

func checkOptions(o Options) error {
	known := func(n string) *Pass {
		for i := range pipeline {
			if pipeline[i].Name == n {
				return &pipeline[i]
			}
		}
		return nil
	}
	if o.StopAfter != "" && known(o.StopAfter) == nil {
		return fmt.Errorf("%w: stop-after: unknown pass %q (passes: %s)", ErrOptions, o.StopAfter, strings.Join(Names(), ", "))
	}
	for _, n := range o.PrintAfter {
		if n != "all" && known(n) == nil {
			return fmt.Errorf("%w: print-after: unknown pass %q (passes: %s, or all)", ErrOptions, n, strings.Join(Names(), ", "))
		}
	}
	for _, n := range o.Skip {
		switch ps := known(n); {
		case ps == nil:
			return fmt.Errorf("%w: skip: unknown pass %q", ErrOptions, n)
		case ps.Required:
			return fmt.Errorf("%w: skip: pass %q is required", ErrOptions, n)
		}
	}
	return nil
}

func hasErrors(ds []diag.Diagnostic) bool {
	for i := range ds {
		if ds[i].Severity == diag.Error {
			return true
		}
	}
	return false
}

// run runs one pass with panic recovery, timing, VerifyEach and PrintAfter.
func (s *State) run(ps Pass) (err error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			if !ok {
				e = fmt.Errorf("%v", r)
			}
			err = &InternalError{Pass: ps.Name, Err: e, Panic: true, Stack: debug.Stack()}
		}
	}()
	s.Ran = append(s.Ran, ps.Name)
	prev := s.Prog
	if e := ps.Run(s); e != nil {
		return &InternalError{Pass: ps.Name, Err: e}
	}
	if s.Opts.TimePasses {
		ops := 0
		if s.Prog != nil {
			ops = s.Prog.NumOps()
		}
		s.Timings = append(s.Timings, Timing{Pass: ps.Name, Elapsed: time.Since(start), Ops: ops})
	}
	if hasErrors(s.Diags) {
		return nil
	}
	if s.Opts.VerifyEach && !ps.Check {
		if e := s.verifyEach(ps.Name, s.Prog != prev); e != nil {
			return &InternalError{Pass: ps.Name, Err: e}
		}
	}
	if slices.Contains(s.Opts.PrintAfter, ps.Name) || slices.Contains(s.Opts.PrintAfter, "all") {
		if e := s.print(ps.Name); e != nil {
			return e
		}
	}
	return nil
}

// verifyEach checks the invariants after pass name (changed: the pass
// replaced the program). A pass that breaks one is an internal error:
// diagnostics it finds are appended, and the error names the first.
func (s *State) verifyEach(name string, changed bool) error {
	if s.Prog != nil && changed {
		opts := verify.Options{Skip: ^verify.Cheap, MaxErrors: s.Opts.Verify.MaxErrors}
		if s.Prog.Level() == ir.LevelPrimitive {
			opts.Level = ir.LevelPrimitive
		}
		ds := verify.Verify(s.Prog, opts)
		s.Diags = append(s.Diags, ds...)
		for _, d := range ds {
			if d.Severity == diag.Error {
				return fmt.Errorf("verify-each after %s: %v", name, d)
			}
		}
	}
	if s.Tables != nil && s.Bundle == nil {
		if err := optable.CheckPeers(s.Tables); err != nil {
			return fmt.Errorf("verify-each after %s: %w", name, err)
		}
	}
	if s.Bundle != nil {
		data, err := bundle.Encode(s.Bundle)
		if err != nil {
			return fmt.Errorf("verify-each after %s: %w", name, err)
		}
		b, err := bundle.Decode(data)
		if err != nil {
			return fmt.Errorf("verify-each after %s: %w", name, err)
		}
		if err := b.CheckTables(); err != nil {
			return fmt.Errorf("verify-each after %s: %w", name, err)
		}
	}
	return nil
}

func (s *State) print(name string) error {
	w := s.Opts.Out
	var err error
	switch {
	case name == "bundle" && s.Bundle != nil:
		id, e := s.Bundle.ID()
		if e != nil {
			return &InternalError{Pass: name, Err: e}
		}
		_, err = fmt.Fprintf(w, "# after %s: bundle %s, %d ranks, %d table bytes, source %v\n",
			name, id, len(s.Bundle.Tables), tableBytes(s.Bundle.Tables), s.Bundle.Source != nil)
	case name == "lower" && s.Raw != nil:
		_, err = fmt.Fprintf(w, "# after %s: %d op tables, %d bytes\n", name, len(s.Raw), tableBytes(s.Raw))
	default:
		if _, err = fmt.Fprintf(w, "# after %s\n", name); err == nil && s.Prog != nil {
			err = ir.Print(w, s.Prog)
		}
	}
	if err != nil {
		return fmt.Errorf("passes: print-after %s: %w", name, err)
	}
	return nil
}

func tableBytes(ts [][]byte) int {
	n := 0
	for _, t := range ts {
		n += len(t)
	}
	return n
}

func (s *State) printTimings() error {
	tw := tabwriter.NewWriter(s.Opts.Out, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "pass\ttime\tops\t\n")
	var total time.Duration
	for _, t := range s.Timings {
		total += t.Elapsed
		fmt.Fprintf(tw, "%s\t%v\t%d\t\n", t.Pass, t.Elapsed.Round(time.Microsecond), t.Ops)
	}
	fmt.Fprintf(tw, "total\t%v\t\t\n", total.Round(time.Microsecond))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("passes: time-passes: %w", err)
	}
	return nil
}

// The passes.

func verifyInput(s *State) error {
	opts := s.Opts.Verify
	opts.Level = ir.LevelBoth
	s.Diags = append(s.Diags, verify.Verify(s.Prog, opts)...)
	return nil
}

func runLegalize(s *State) error {
	if s.Prog == nil || s.Prog.Level() != ir.LevelTransfer {
		return nil // already primitive: nothing to do, nothing copied
	}
	q, ds := legalize.Legalize(s.Prog)
	s.Diags = append(s.Diags, ds...)
	if q != nil {
		s.Prog = q
	}
	return nil
}

// verifyPrimitive checks the legalised program. When verify-input ran (and
// so proved the input: the pipeline stops after a pass with errors), it
// runs the verifier's cheap checks (verify.Cheap: structure and
// synchronisation, linear in the ops); legalisation preserves deadlock
// freedom, race freedom and the postcondition (docs/passes.md,
// "Verification after legalisation", and TestCheapVerifyAfterLegalize).
// With VerifyEach, or when verify-input was skipped, it runs every check
// the options ask for.
func verifyPrimitive(s *State) error {
	opts := s.Opts.Verify
	opts.Level = ir.LevelPrimitive
	if !s.Opts.VerifyEach && slices.Contains(s.Ran, "verify-input") {
		opts.Skip |= ^verify.Cheap
	}
	s.Diags = append(s.Diags, verify.Verify(s.Prog, opts)...)
	return nil
}

// lower writes every rank's op table straight into its binary form
// (optable.LowerAllBinary: the checks and bytes of LowerAll+MarshalBinary,
// without building the tables). It decodes them into s.Tables only when
// the run stops here or VerifyEach checks them.
func lower(s *State) error {
	raw, err := optable.LowerAllBinary(s.Prog)
	if err != nil {
		var d diag.Diagnostic
		if errors.As(err, &d) {
			s.Diags = append(s.Diags, d)
			return nil
		}
		return err
	}
	mark := func(f func([]byte) error) error {
		for r := range raw {
			if err := f(raw[r]); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
		return nil
	}
	switch {
	case verify.NeedsLaunchFence(s.Prog, s.Diags):
		err = mark(optable.MarkFence)
	case verify.SelfFencedLL(s.Prog, s.Diags):
		err = mark(optable.MarkSelfFenced)
	}
	if err != nil {
		return err
	}
	s.Raw = raw
	if s.Opts.VerifyEach || s.Opts.StopAfter == "lower" {
		s.Tables = make([]*optable.Table, len(raw))
		for r := range raw {
			if s.Tables[r], err = optable.Decode(raw[r]); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
	}
	return nil
}

func makeBundle(s *State) error {
	// The source is printed on a second goroutine while bundle.New
	// summarises the legalised program (both only read).
	var src []byte
	var printErr error
	done := make(chan any, 1)
	if s.Opts.EmbedSource && s.Input != nil {
		go func() {
			defer func() { done <- recover() }()
			// About 16 bytes per transfer op and 40 per primitive op are
			// printed: room for 32 per op saves most regrowth.
			var buf bytes.Buffer
			buf.Grow(32*s.Input.NumOps() + 256*len(s.Input.Ranks) + 4096)
			printErr = ir.Print(&buf, s.Input)
			src = buf.Bytes()
		}()
	} else {
		done <- nil
	}
	b, err := bundle.New(s.Prog, s.Raw, nil)
	if v := <-done; v != nil {
		panic(v) // run reports it as this pass's internal error
	}
	if printErr != nil {
		return fmt.Errorf("printing the source: %w", printErr)
	}
	if err != nil {
		return err
	}
	b.Source = src
	// The whole program was proven here when verify-input ran with every
	// check (the pipeline stops at a pass with errors), and lower checked
	// every table against the other ranks (optable.CheckPeers' rules): a
	// runtime then checks only the sections it loads.
	b.Verified = slices.Contains(s.Ran, "verify-input") && s.Opts.Verify.Skip == 0
	s.Bundle = b
	return nil
}
