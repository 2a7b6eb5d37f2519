// Package csvsafe guards CSV cells against spreadsheet formula injection
// (OWASP "CSV injection"). The API's and the console's exports both use
// it, so the rule is written once. It must never change a cell's meaning
// beyond that guard.
package csvsafe

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// formulaStarters are the characters a spreadsheet may read as the start
// of a formula: = + - @, their full-width and small forms (which some
// spreadsheets normalize to ASCII before they parse), and the minus sign.
const formulaStarters = "=+-@＝＋－＠﹦﹢﹣﹫−"

// Text guards a free-text cell: a cell a spreadsheet could evaluate is
// prefixed with a single quote. That is one starting with a formula
// character, or with any whitespace, control or invisible format
// character (space, tab, CR, LF, no-break or ideographic space, a byte
// order mark…), since spreadsheets trim those before they look for one.
func Text(s string) string {
	r, _ := utf8.DecodeRuneInString(s)
	if s == "" {
		return s
	}
	if strings.ContainsRune(formulaStarters, r) || unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
		return "'" + s
	}
	return s
}
