package policy

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The participle grammar of policy expressions (docs/policy-language.md,
// "Grammar"). Precedence, loosest first: ?: (right-assoc), ||, &&,
// comparisons (non-associative), + -, * / %, unary - !, postfix [index].
// These structs are the raw parse tree; convert.go turns them into Node.

var policyLexer = lexer.MustSimple([]lexer.SimpleRule{
	{Name: "Float", Pattern: `\d[\d_]*\.[\d_]*([eE][-+]?\d+)?|\.\d[\d_]*([eE][-+]?\d+)?|\d[\d_]*[eE][-+]?\d+`},
	{Name: "Int", Pattern: `0[xX][0-9a-fA-F_]+|\d[\d_]*`},
	{Name: "Ident", Pattern: `[A-Za-z_][A-Za-z0-9_]*`},
	{Name: "Op", Pattern: `&&|\|\||==|!=|<=|>=|[-+*/%<>!?:(),\[\]]`},
	{Name: "Whitespace", Pattern: `[ \t\r\n]+`},
})

var parser = participle.MustBuild[pExpr](
	participle.Lexer(policyLexer),
	participle.Elide("Whitespace"),
	participle.UseLookahead(2),
)

type pExpr struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Cond   *pOr   `parser:"@@"`
	Then   *pExpr `parser:"( '?' @@"`
	Else   *pExpr `parser:"  ':' @@ )?"`
}

type pOr struct {
	Head *pAnd     `parser:"@@"`
	Tail []*pOrArm `parser:"@@*"`
}

type pOrArm struct {
	Pos   lexer.Position
	Op    string `parser:"@'||'"`
	Right *pAnd  `parser:"@@"`
}

type pAnd struct {
	Head *pCmp      `parser:"@@"`
	Tail []*pAndArm `parser:"@@*"`
}

type pAndArm struct {
	Pos   lexer.Position
	Op    string `parser:"@'&&'"`
	Right *pCmp  `parser:"@@"`
}

type pCmp struct {
	Pos   lexer.Position
	Left  *pAdd  `parser:"@@"`
	Op    string `parser:"( @('==' | '!=' | '<=' | '>=' | '<' | '>')"`
	Right *pAdd  `parser:"  @@ )?"`
}

type pAdd struct {
	Head *pMul      `parser:"@@"`
	Tail []*pAddArm `parser:"@@*"`
}

type pAddArm struct {
	Pos   lexer.Position
	Op    string `parser:"@('+' | '-')"`
	Right *pMul  `parser:"@@"`
}

type pMul struct {
	Head *pUnary    `parser:"@@"`
	Tail []*pMulArm `parser:"@@*"`
}

type pMulArm struct {
	Pos   lexer.Position
	Op    string  `parser:"@('*' | '/' | '%')"`
	Right *pUnary `parser:"@@"`
}

type pUnary struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Op      string    `parser:"(  @('-' | '!')"`
	Operand *pUnary   `parser:"   @@ )"`
	Post    *pPostfix `parser:"| @@"`
}

type pPostfix struct {
	Pos   lexer.Position
	Prim  *pPrimary `parser:"@@"`
	Index []*pIndex `parser:"@@*"`
}

type pIndex struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Expr   *pExpr `parser:"'[' @@ ']'"`
}

type pPrimary struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Float  *string `parser:"  @Float"`
	Int    *string `parser:"| @Int"`
	Bool   *string `parser:"| @('true' | 'false')"`
	Call   *pCall  `parser:"| @@"`
	Ident  *string `parser:"| @Ident"`
	Paren  *pExpr  `parser:"| '(' @@ ')'"`
	Vec    *pVec   `parser:"| @@"`
}

type pCall struct {
	Name string   `parser:"@Ident '('"`
	Args []*pExpr `parser:"( @@ ( ',' @@ )* )? ')'"`
}

type pVec struct {
	Elems []*pExpr `parser:"'[' ( @@ ( ',' @@ )* )? ']'"`
}
