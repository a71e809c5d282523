package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2"

	"github.com/theseus-ccl/theseus/diag"
)

// Limits on untrusted expressions. Exceeding one is a PolicyTooDeep
// diagnostic, so neither the parser nor the later stages can be driven into
// deep recursion or large allocations.
const (
	MaxSourceLen = 4096 // bytes of one expression
	MaxDepth     = 64   // nesting of parentheses, brackets and sub-expressions
	MaxNodes     = 1024 // nodes of one expression tree
)

// reporter turns byte offsets of the source into diagnostics at
// file:line:col of the file the expression came from.
type reporter struct {
	src  string
	opt  *Options
	list *diag.List
}

// pos maps a byte offset of the source to a 1-based (line, col) of the
// containing file. Columns count runes.
func (r *reporter) pos(off int) (int, int) {
	off = min(max(off, 0), len(r.src))
	line, start := 1, 0
	for i := 0; i < off; i++ {
		if r.src[i] == '\n' {
			line++
			start = i + 1
		}
	}
	col := utf8.RuneCountInString(r.src[start:off]) + 1
	baseLine, baseCol := max(r.opt.Line, 1), max(r.opt.Col, 1)
	if line == 1 {
		return baseLine, baseCol + col - 1
	}
	return baseLine + line - 1, col
}

func (r *reporter) add(sev diag.Severity, code diag.Code, off int, hint, format string, args ...any) {
	if hint == "" {
		if ci, ok := diag.Lookup(code); ok {
			hint = ci.Hint
		}
	}
	line, col := r.pos(off)
	r.list.Add(diag.Diagnostic{Code: code, Severity: sev, File: r.opt.File, Line: line, Col: col,
		Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

func (r *reporter) errorf(code diag.Code, off int, hint, format string, args ...any) {
	r.add(diag.Error, code, off, hint, format, args...)
}

// Parse parses src into an unchecked Node tree. It returns nil and
// diagnostics (PolicySyntax, PolicyTooDeep) when src is not a well-formed
// expression within the limits above.
func Parse(src string, opt Options) (*Node, []diag.Diagnostic) {
	var list diag.List
	r := &reporter{src: src, opt: &opt, list: &list}
	n := parse(r)
	return n, list.Items
}

func parse(r *reporter) *Node {
	src := r.src
	if len(src) > MaxSourceLen {
		r.errorf(diag.PolicyTooDeep, 0, "", "expression of %d bytes is over the limit of %d", len(src), MaxSourceLen)
		return nil
	}
	if strings.TrimSpace(src) == "" {
		r.errorf(diag.PolicySyntax, 0, "write an expression, e.g. true", "empty expression")
		return nil
	}
	depth := 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '(', '[':
			depth++
			if depth > MaxDepth {
				r.errorf(diag.PolicyTooDeep, i, "", "brackets nested deeper than %d", MaxDepth)
				return nil
			}
		case ')', ']':
			depth--
		}
	}
	tree, err := parser.ParseString("", src)
	if err != nil {
		off := 0
		msg := err.Error()
		var perr participle.Error
		if errors.As(err, &perr) {
			off = perr.Position().Offset
			msg = perr.Message()
		}
		msg, hint := syntaxMessage(src, off, msg)
		r.errorf(diag.PolicySyntax, off, hint, "%s", msg)
		return nil
	}
	c := &converter{r: r}
	n := c.expr(tree)
	if c.failed {
		return nil
	}
	if tooDeep(n, MaxDepth) {
		r.errorf(diag.PolicyTooDeep, 0, "", "expression nested deeper than %d", MaxDepth)
		return nil
	}
	return n
}

// converter turns the participle parse tree into Nodes, building binary
// operators left-associatively and parsing literals.
type converter struct {
	r      *reporter
	nodes  int
	failed bool
}

func (c *converter) node(k Kind, from, to int) *Node {
	c.nodes++
	if c.nodes == MaxNodes+1 {
		c.r.errorf(diag.PolicyTooDeep, from, "", "expression has more than %d nodes", MaxNodes)
		c.failed = true
	}
	return &Node{Kind: k, Span: Span{from, to}}
}

func bin(k Kind, op string, l, r *Node, n *Node) *Node {
	n.Kind, n.Op, n.Kids = k, op, []*Node{l, r}
	n.Span = Span{l.Span.From, r.Span.To}
	return n
}

func (c *converter) expr(e *pExpr) *Node {
	if c.failed || e == nil {
		return nil
	}
	cond := c.or(e.Cond)
	if e.Then == nil || cond == nil {
		return cond
	}
	n := c.node(KTernary, e.Pos.Offset, e.EndPos.Offset)
	th, el := c.expr(e.Then), c.expr(e.Else)
	if c.failed {
		return nil
	}
	n.Kids = []*Node{cond, th, el}
	n.Span = Span{cond.Span.From, el.Span.To}
	return n
}

// chain builds a left-associative chain of binary operators of one
// precedence level: head, then (op, right) for each arm.
func chain[T, A any](c *converter, k Kind, head *T, arms []A, split func(A) (string, *T), sub func(*T) *Node) *Node {
	l := sub(head)
	for _, a := range arms {
		op, right := split(a)
		r := sub(right)
		if c.failed {
			return nil
		}
		l = bin(k, op, l, r, c.node(k, 0, 0))
	}
	return l
}

func (c *converter) or(e *pOr) *Node {
	return chain(c, KLogic, e.Head, e.Tail, func(a *pOrArm) (string, *pAnd) { return a.Op, a.Right }, c.and)
}

func (c *converter) and(e *pAnd) *Node {
	return chain(c, KLogic, e.Head, e.Tail, func(a *pAndArm) (string, *pCmp) { return a.Op, a.Right }, c.cmp)
}

func (c *converter) cmp(e *pCmp) *Node {
	l := c.add(e.Left)
	if e.Right == nil || c.failed {
		return l
	}
	r := c.add(e.Right)
	if c.failed {
		return nil
	}
	return bin(KBinary, e.Op, l, r, c.node(KBinary, 0, 0))
}

func (c *converter) add(e *pAdd) *Node {
	return chain(c, KBinary, e.Head, e.Tail, func(a *pAddArm) (string, *pMul) { return a.Op, a.Right }, c.mul)
}

func (c *converter) mul(e *pMul) *Node {
	return chain(c, KBinary, e.Head, e.Tail, func(a *pMulArm) (string, *pUnary) { return a.Op, a.Right }, c.unary)
}

func (c *converter) unary(e *pUnary) *Node {
	if c.failed {
		return nil
	}
	if e.Post != nil {
		return c.postfix(e.Post)
	}
	// -<int literal> is parsed as one literal so that -9223372036854775808
	// is representable.
	if e.Op == "-" && e.Operand.Post != nil && len(e.Operand.Post.Index) == 0 && e.Operand.Post.Prim.Int != nil {
		p := e.Operand.Post.Prim
		return c.intLit("-"+*p.Int, e.Pos.Offset, p.EndPos.Offset)
	}
	n := c.node(KUnary, e.Pos.Offset, e.EndPos.Offset)
	k := c.unary(e.Operand)
	if c.failed {
		return nil
	}
	n.Op, n.Kids = e.Op, []*Node{k}
	n.Span.To = k.Span.To
	return n
}

func (c *converter) postfix(e *pPostfix) *Node {
	n := c.primary(e.Prim)
	for _, ix := range e.Index {
		if c.failed {
			return nil
		}
		i := c.expr(ix.Expr)
		if c.failed {
			return nil
		}
		m := c.node(KIndex, n.Span.From, ix.EndPos.Offset)
		m.Kids = []*Node{n, i}
		n = m
	}
	return n
}

func (c *converter) intLit(s string, from, to int) *Node {
	n := c.node(KInt, from, to)
	v, err := strconv.ParseInt(s, 0, 64)
	if errors.Is(err, strconv.ErrSyntax) {
		// The lexer's forms admit underscores anywhere; Go's rules (which
		// the literal follows) put one only between digits.
		c.r.errorf(diag.PolicySyntax, from, "put underscores only between digits, as in 1_000 or 0xff_ff", "malformed integer literal %s", s)
		c.failed = true
		return nil
	}
	if err != nil {
		c.r.errorf(diag.PolicySyntax, from, "integers are 64-bit: use a float literal for larger values", "integer literal %s out of range", s)
		c.failed = true
		return nil
	}
	n.I = v
	return n
}

func (c *converter) primary(e *pPrimary) *Node {
	if c.failed {
		return nil
	}
	from, to := e.Pos.Offset, e.EndPos.Offset
	switch {
	case e.Int != nil:
		return c.intLit(*e.Int, from, to)
	case e.Float != nil:
		n := c.node(KFloat, from, to)
		f, err := strconv.ParseFloat(*e.Float, 64)
		if err != nil {
			// Only overflow gets here: the lexer admits no other malformed float.
			c.r.errorf(diag.PolicySyntax, from, "", "float literal %s out of range", *e.Float)
			c.failed = true
			return nil
		}
		n.F = f
		return n
	case e.Bool != nil:
		n := c.node(KBool, from, to)
		n.B = *e.Bool == "true"
		return n
	case e.Call != nil:
		n := c.node(KCall, from, to)
		n.Op = e.Call.Name
		for _, a := range e.Call.Args {
			k := c.expr(a)
			if c.failed {
				return nil
			}
			n.Kids = append(n.Kids, k)
		}
		return n
	case e.Ident != nil:
		n := c.node(KAttr, from, to)
		n.Name = *e.Ident
		return n
	case e.Paren != nil:
		n := c.expr(e.Paren)
		if n != nil {
			n.Span = Span{from, to} // include the parentheses
		}
		return n
	case e.Vec != nil:
		n := c.node(KVec, from, to)
		n.V = []float64{}
		for _, el := range e.Vec.Elems {
			k := c.expr(el)
			if c.failed {
				return nil
			}
			switch k.Kind {
			case KInt:
				n.V = append(n.V, float64(k.I))
			case KFloat:
				n.V = append(n.V, k.F)
			case KUnary:
				if k.Op == "-" && k.Kids[0].Kind == KFloat {
					n.V = append(n.V, -k.Kids[0].F)
					continue
				}
				fallthrough
			default:
				c.r.errorf(diag.PolicyVector, k.Span.From, "write vector literals as [1, 2.5, -3]", "vector literal elements must be number literals")
				c.failed = true
				return nil
			}
		}
		return n
	}
	c.r.errorf(diag.PolicySyntax, from, "", "unexpected input")
	c.failed = true
	return nil
}

// tooDeep reports whether the tree is deeper than limit; its recursion
// stops at the limit.
func tooDeep(n *Node, limit int) bool {
	if limit == 0 {
		return true
	}
	for _, k := range n.Kids {
		if tooDeep(k, limit-1) {
			return true
		}
	}
	return false
}

var participleMsg = regexp.MustCompile(`^unexpected token "(.*)"(?: \(expected (.*)\))?$`)

// syntaxMessage rewrites participle's messages, which name grammar structs,
// into the user's terms, and picks a hint for common mistakes.
func syntaxMessage(src string, off int, msg string) (string, string) {
	hint := ""
	rest := ""
	if off >= 0 && off < len(src) {
		rest = src[off:]
	}
	switch {
	case strings.HasPrefix(rest, "."):
		hint = "names have no dots: declare an endo attribute with path request.x and use its name"
	case strings.HasPrefix(rest, "\"") || strings.HasPrefix(rest, "'"):
		hint = "expressions have no strings; enums are ints (docs/policy-language.md)"
	case strings.HasPrefix(rest, "=") && !strings.HasPrefix(rest, "=="):
		hint = "compare with =="
	}
	if strings.Contains(msg, "invalid input text") {
		c, _ := utf8.DecodeRuneInString(rest)
		return fmt.Sprintf("unexpected character %q", c), hint
	}
	m := participleMsg.FindStringSubmatch(msg)
	if m == nil {
		return msg, hint
	}
	tok, want := m[1], m[2]
	out := fmt.Sprintf("unexpected %q", tok)
	if tok == "<EOF>" {
		out = "unexpected end of expression"
	}
	switch {
	case strings.HasPrefix(want, `"`) && strings.Count(want, `"`) == 2:
		out += ", expected " + want
	case want != "":
		out += ", expected an operand"
	}
	if hint == "" && (tok == "<" || tok == ">" || tok == "<=" || tok == ">=" || tok == "==" || tok == "!=") {
		hint = "comparisons do not chain: write a < b && b < c"
	}
	return out, hint
}
