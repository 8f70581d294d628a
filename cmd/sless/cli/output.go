package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// outputFlag is -o of a read command, limited to the formats it can print.
type outputFlag struct {
	format  string
	allowed []string
}

func bindOutput(cmd *cobra.Command, allowed ...string) *outputFlag {
	o := &outputFlag{allowed: allowed}
	cmd.Flags().StringVarP(&o.format, "output", "o", allowed[0], "output format: "+strings.Join(allowed, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(allowed, cobra.ShellCompDirectiveNoFileComp))
	return o
}

func (o *outputFlag) check() error {
	if !slices.Contains(o.allowed, o.format) {
		return usageErrorf("-o %s: want one of %s", o.format, strings.Join(o.allowed, ", "))
	}
	return nil
}

// write prints v as JSON or YAML (the API's own field names), or as text for the table
// format.
func (o *outputFlag) write(w io.Writer, v any, text func(io.Writer) error) error {
	switch o.format {
	case formatJSON:
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding JSON: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case formatYAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	return text(w)
}

// table is rows of text under a header, printed in aligned columns.
type table struct {
	header []string
	rows   [][]string
}

func (t table) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, r := range append([][]string{t.header}, t.rows...) {
		cells := make([]string, len(r))
		for i, c := range r {
			if c == "" {
				c = "-" // an empty cell would shift the eye to the next column
			}
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// fields prints "key: value" lines aligned, for describe.
type fields struct{ tw *tabwriter.Writer }

func newFields(w io.Writer) fields { return fields{tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)} }

// add prints a line unless value is empty (the API leaves unset fields out too).
func (f fields) add(key string, value any) {
	s := fmt.Sprint(value)
	if s == "" || s == "<nil>" {
		return
	}
	fmt.Fprintf(f.tw, "%s:\t%s\n", key, s)
}

// addTime prints t in local time, unless it is nil.
func (f fields) addTime(key string, t *time.Time) {
	if t != nil {
		f.add(key, t.Local().Format(time.RFC3339))
	}
}

func (f fields) flush() error { return f.tw.Flush() }

// age is how long ago t was, in the largest whole unit (45s, 12m, 3h, 5d).
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
