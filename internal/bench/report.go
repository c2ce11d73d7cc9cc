package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report as a table: one line per series, the ratio
// to its floor last, then the errors by code.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "sandboxio bench %s: server %s, started %s", r.Scenario, r.Server, r.Started.Format("2006-01-02T15:04:05Z"))
	if r.LoadAvg != "" {
		fmt.Fprintf(w, ", load average %s", r.LoadAvg)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "series\tclass\tlive\tclients\tops\terrors\tp50 ms\tp90 ms\tp99 ms\tmax ms\trate/s\tMB/s\tRSS MiB\tCPU µs/op\tvs floor\t")
	for _, m := range r.Measures {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%s\t%s\t%s\t%s\t\n",
			m.Name, m.Class, num(m.Population), num(m.Clients), m.Ops, m.errorCount(), m.P50, m.P90, m.P99, m.Max, m.Rate,
			dec(m.MBps), rssText(m.RSSMiB), numsText(m.CPUPerOp, 0), m.ratios())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range r.Measures {
		if len(m.Errors) == 0 {
			continue
		}
		codes := make([]string, 0, len(m.Errors))
		for c := range m.Errors {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		parts := make([]string, len(codes))
		for i, c := range codes {
			parts[i] = fmt.Sprintf("%s ×%d", c, m.Errors[c])
		}
		fmt.Fprintf(w, "errors in %s: %s\n", m.Name, strings.Join(parts, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func (m Measure) errorCount() int {
	n := 0
	for _, v := range m.Errors {
		n += v
	}
	return n
}

// ratios is "p50 3.1× floor ping" and/or "rate 0.45× …".
func (m Measure) ratios() string {
	if m.VsFloor == "" {
		return ""
	}
	var parts []string
	if m.RatioP50 > 0 {
		parts = append(parts, fmt.Sprintf("p50 %.2f×", m.RatioP50))
	}
	if m.RatioRate > 0 {
		parts = append(parts, fmt.Sprintf("rate %.2f×", m.RatioRate))
	}
	return strings.Join(parts, " ") + " " + m.VsFloor
}

func num(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func dec(f float64) string {
	if f == 0 {
		return ""
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// rssText is "dev=52.5" or "router=20.1 worker=35.2".
func rssText(rss map[string]float64) string { return numsText(rss, 1) }

// numsText is "dev=52.5" or "router=20.1 worker=35.2", with prec decimals.
func numsText(rss map[string]float64, prec int) string {
	names := make([]string, 0, len(rss))
	for n := range rss {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + strconv.FormatFloat(rss[n], 'f', prec, 64)
	}
	return strings.Join(parts, " ")
}
