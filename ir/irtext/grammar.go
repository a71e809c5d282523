package irtext

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The participle grammar of the textual IR (docs/ir-text.md has the EBNF).
// It is deliberately generic where the IR is: every op has the same shape
// (mnemonic, operands, "->" dsts, attributes), so any ir.Op, valid or not,
// has a text; parse.go checks names, values and ids. Newlines are
// insignificant: attributes are keywords, and an identifier that is not
// one starts the next op.
//
// A file is parsed in pieces, the header and then one rank at a time
// (parse.go), so that participle's syntax tree, which costs tens of bytes
// per byte of text, never holds more than one rank.

var (
	headerParser = participle.MustBuild[astFile](participle.Lexer(textLexer), participle.UseLookahead(1))
	rankParser   = participle.MustBuild[astRank](participle.Lexer(textLexer), participle.UseLookahead(1))
)

// Numbers are captured as whole tokens (value and position): the lexer
// folds a leading "-" into Int, and "@c" into one Chan token.

// astFile is the part of a file before its first rank.
type astFile struct {
	Header *astHeader `parser:"@@"`
	Meta   []*astMeta `parser:"@@*"`
}

type astHeader struct {
	Pos        lexer.Position
	Name       string           `parser:"'program' @String"`
	Collective lexer.Token      `parser:"@Ident"`
	Attrs      []*astHeaderAttr `parser:"@@*"`
}

// astHeaderAttr is a flag or key=value; the builder knows the keys, so that
// a misspelt one is reported as an unknown field.
type astHeaderAttr struct {
	Pos  lexer.Position
	Flag string      `parser:"(  @('inplace' | 'outofplace')"`
	Key  string      `parser:"| @Ident '='"`
	Num  lexer.Token `parser:"  ( @Int"`
	Word lexer.Token `parser:"  | @Ident ) )"`
}

type astMeta struct {
	Pos   lexer.Position
	Key   string `parser:"'meta' @String '='"`
	Value string `parser:"@String"`
}

type astRank struct {
	Pos   lexer.Position
	ID    lexer.Token    `parser:"'rank' @Int"`
	Attrs []*astKV       `parser:"@@*"`
	Items []*astRankItem `parser:"'{' @@* '}'"`
}

// astKV is a rank or threadblock attribute, key = Int (input, output,
// scratch; send, recv, chan; the builder checks the key).
type astKV struct {
	Pos lexer.Position
	Key string      `parser:"@Ident '='"`
	Num lexer.Token `parser:"@Int"`
}

type astRankItem struct {
	Channel *astChannel `parser:"  @@"`
	TB      *astTB      `parser:"| @@"`
}

type astChannel struct {
	Pos   lexer.Position
	ID    lexer.Token       `parser:"'channel' @Int"`
	Attrs []*astChannelAttr `parser:"@@*"`
}

type astChannelAttr struct {
	Pos      lexer.Position
	Peer     lexer.Token `parser:"(  'peer' '=' @Int"`
	PeerChan lexer.Token `parser:"   '.' @Int"`
	Type     string      `parser:"| @('memory' | 'port' | 'sm' | 'proxy')"`
	Init     lexer.Token `parser:"| 'init' '=' @Int"`
	Unknown  *astKV      `parser:"| @@ )"`
}

type astTB struct {
	Pos   lexer.Position
	ID    lexer.Token `parser:"'tb' @Int"`
	Attrs []*astKV    `parser:"@@*"`
	Ops   []*astOp    `parser:"'{' @@* '}'"`
}

type astOp struct {
	Pos      lexer.Position
	Name     string        `parser:"@Ident"`
	Operands []*astOperand `parser:"( @@ ( ',' @@ )* )?"`
	Dsts     []*astOperand `parser:"( '->' @@ ( ',' @@ )* )?"`
	Attrs    []*astOpAttr  `parser:"@@*"`
}

// astOperand is a ref or, among the srcs, a channel "@c"
// (signal/wait/flush). Refs are single tokens (see lexer.go).
type astOperand struct {
	Tok lexer.Token `parser:"@(Ref | Chan)"`
}

// astOpAttr is one op attribute. Its keyword decides the rest, so that
// trying it at the end of every op costs one token of lookahead; the
// builder checks that each keyword has the value it needs.
type astOpAttr struct {
	Pos  lexer.Position
	Key  string      `parser:"@('count' | 'id' | 'tbs' | 'deps' | 'publish')"`
	Num  lexer.Token `parser:"( '=' ( @Int"`
	Deps []*astDep   `parser:"        | @@ ( ',' @@ )* ) )?"`
}

type astDep struct {
	TB   lexer.Token `parser:"'(' @Int ','"`
	Step lexer.Token `parser:"@Int ')'"`
}
