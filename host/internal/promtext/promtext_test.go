package promtext

import (
	"strings"
	"testing"
)

func TestWriterEscapesLabelValuesAndHelp(t *testing.T) {
	var b strings.Builder
	w := NewWriter(&b)
	w.Family("requests_total", "counter", "Requests\nby \\ path.")
	w.Sample("requests_total", "3", "path", `/a"b`+"\n"+`c\d`, "code", "200")
	w.Family("up", "gauge", "")
	w.Sample("up", "1")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "# HELP requests_total Requests\\nby \\\\ path.\n# TYPE requests_total counter\n" +
		`requests_total{path="/a\"b\nc\\d",code="200"} 3` + "\n" +
		"# TYPE up gauge\nup 1\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
