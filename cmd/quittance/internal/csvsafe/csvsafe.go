// Package csvsafe guards CSV cells against spreadsheet formula injection
// (OWASP "CSV injection"). The API's and the console's exports both use
// it, so the rule is written once. It must never change a cell's meaning
// beyond that guard.
package csvsafe

import "strings"

// Text guards a free-text cell: a cell a spreadsheet would evaluate
// (starting with = + - @, a tab or a carriage return) is prefixed with a
// single quote.
func Text(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
