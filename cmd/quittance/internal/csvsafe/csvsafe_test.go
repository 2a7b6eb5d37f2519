package csvsafe_test

import (
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/csvsafe"
)

// TestText is the guard's table: every cell a spreadsheet could read as a
// formula gets a leading quote, and every other cell is left as it is.
func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"acme", "acme"},
		{"tenant-1", "tenant-1"},
		{"1+1", "1+1"},
		{"a=b", "a=b"},
		{"'quoted", "'quoted"},
		{"=1+1", "'=1+1"},
		{"+1", "'+1"},
		{"-1", "'-1"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1", "'\t=1"},
		{"\r=1", "'\r=1"},
		{"\n=1", "'\n=1"},
		{" =1", "' =1"},
		{"  @x", "'  @x"},
		{"\u00a0=1", "'\u00a0=1"}, // no-break space
		{"\u3000=1", "'\u3000=1"}, // ideographic space
		{"\ufeff=1", "'\ufeff=1"}, // byte order mark
		{"\u200b=1", "'\u200b=1"}, // zero-width space
		{"\x00=1", "'\x00=1"},     // NUL
		{"＝1+1", "'＝1+1"},         // full-width =
		{"＋1", "'＋1"},             // full-width +
		{"－1", "'－1"},             // full-width -
		{"＠SUM(A1)", "'＠SUM(A1)"}, // full-width @
		{"﹦1", "'﹦1"},             // small =
		{"﹢1", "'﹢1"},             // small +
		{"﹣1", "'﹣1"},             // small -
		{"﹫x", "'﹫x"},             // small @
		{"−1", "'−1"},             // minus sign
		{"\xff=1", "'\xff=1"},     // not UTF-8
		{"é=1", "é=1"},
	} {
		if got := csvsafe.Text(c.in); got != c.want {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
