package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Reference is the configuration reference as Markdown: every key of every
// section with its flag, its default and what it does, read from Config's
// tags and Default(), then the keys of a [[device_plugin.resources]] table
// with DefaultResource()'s values and those of a [[pod_network.ipam]] and
// a [[topology.rails]] table.
// docs/configuration.md carries it, and a test keeps the two equal, so the
// page cannot drift from the code.
func Reference() string {
	def := Default()
	var b strings.Builder
	section := ""
	for _, f := range keys(&def) {
		name, key, _ := strings.Cut(f.key, ".")
		if name != section {
			section = name
			fmt.Fprintf(&b, "\n### [%s]\n\n| key | flag | default | what it does |\n|---|---|---|---|\n", section)
		}
		flag := ""
		if f.flag != "" {
			flag = "`--" + f.flag + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", key, flag, tomlValue(f.val), cell(f.help))
	}
	arrayOfTables(&b, "device_plugin.resources", DefaultResource())
	arrayOfTables(&b, "pod_network.ipam", PodNetworkIPAM{})
	arrayOfTables(&b, "topology.rails", Rail{})
	return strings.TrimPrefix(b.String(), "\n")
}

// arrayOfTables writes the keys of one [[name]] table, each with its value
// in example, the table's defaults.
func arrayOfTables(b *strings.Builder, name string, example any) {
	fmt.Fprintf(b, "\n### [[%s]]\n\n| key | default | what it does |\n|---|---|---|\n", name)
	v := reflect.ValueOf(example)
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		fmt.Fprintf(b, "| `%s` | `%s` | %s |\n", tomlName(f), tomlValue(v.Field(i)), cell(f.Tag.Get("help")))
	}
}

// tomlValue is v as the file would spell it; an unset list or map is
// empty.
func tomlValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Slice:
		if v.Len() == 0 {
			return "[]"
		}
	case reflect.Map:
		if v.Len() == 0 {
			return "{}"
		}
	}
	out, err := toml.Marshal(map[string]any{"v": v.Interface()})
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "v = ")
}

// cell makes text safe in a Markdown table cell.
func cell(text string) string { return strings.ReplaceAll(text, "|", `\|`) }
