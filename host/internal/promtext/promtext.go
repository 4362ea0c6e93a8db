// Package promtext writes the Prometheus text exposition format (version
// 0.0.4), the one place skewgate's components format their metrics.
package promtext

import (
	"bufio"
	"io"
	"strings"
)

// ContentType is the media type of the format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Writer buffers metric families; Flush writes them out.
type Writer struct {
	bw *bufio.Writer
}

// NewWriter writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{bw: bufio.NewWriter(w)} }

// Family starts a metric family with its HELP (omitted when empty) and TYPE
// lines; kind is counter, gauge or histogram.
func (w *Writer) Family(name, kind, help string) {
	if help != "" {
		w.bw.WriteString("# HELP " + name + " " + helpEscaper.Replace(help) + "\n")
	}
	w.bw.WriteString("# TYPE " + name + " " + kind + "\n")
}

// Sample writes one sample of the current family. labels alternate names and
// values; values are escaped.
func (w *Writer) Sample(name, value string, labels ...string) {
	w.bw.WriteString(name)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			w.bw.WriteByte('{')
		} else {
			w.bw.WriteByte(',')
		}
		w.bw.WriteString(labels[i] + `="` + labelEscaper.Replace(labels[i+1]) + `"`)
	}
	if len(labels) > 1 {
		w.bw.WriteByte('}')
	}
	w.bw.WriteString(" " + value + "\n")
}

// Flush writes what is buffered and reports the first write error.
func (w *Writer) Flush() error { return w.bw.Flush() }

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)
