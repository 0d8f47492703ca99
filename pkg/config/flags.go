package config

import (
	"encoding"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// field is one leaf key of Config, with its flag where it has one.
type field struct {
	key  string // section.key, as in the file
	flag string
	help string
	val  reflect.Value
}

// fields walks cfg's sections and returns every key that carries a flag tag.
func fields(cfg *Config) []field {
	var out []field
	for _, f := range keys(cfg) {
		if f.flag != "" {
			out = append(out, f)
		}
	}
	return out
}

// keys are every key of cfg's sections, in the struct's order.
func keys(cfg *Config) []field {
	var out []field
	root := reflect.ValueOf(cfg).Elem()
	for i := 0; i < root.NumField(); i++ {
		section := root.Type().Field(i)
		sv := root.Field(i)
		for j := 0; j < sv.NumField(); j++ {
			f := sv.Type().Field(j)
			out = append(out, field{
				key:  section.Tag.Get("toml") + "." + tomlName(f),
				flag: f.Tag.Get("flag"), help: f.Tag.Get("help"), val: sv.Field(j),
			})
		}
	}
	return out
}

// tomlName is the key a struct field has in the file.
func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return name
}

var (
	durationType = reflect.TypeOf(Duration{})
	rangesType   = reflect.TypeOf(PodNetworkRanges{})
)

// textValue is a key whose type parses itself (Memlock, AddrRange, ...):
// its flag is a string, read as the file's value is.
type textValue interface {
	encoding.TextMarshaler
	encoding.TextUnmarshaler
}

// asText is f's value as a textValue, if its type is one (Duration is not
// taken: its flag is a duration).
func asText(f field) (textValue, bool) {
	if f.val.Type() == durationType || !f.val.CanAddr() {
		return nil, false
	}
	v, ok := f.val.Addr().Interface().(textValue)
	return v, ok
}

// RegisterFlags adds one flag per config key to fs, with the defaults as
// their documented values. Flags override the file: see ApplyFlags.
func RegisterFlags(fs *pflag.FlagSet) {
	def := Default()
	for _, f := range fields(&def) {
		help := f.help + " (config: " + f.key + ")"
		if f.val.Kind() == reflect.String { // string, and named ones such as Delivery
			fs.String(f.flag, f.val.String(), help)
			continue
		}
		if t, ok := asText(f); ok {
			text, err := t.MarshalText()
			if err != nil {
				panic(fmt.Sprintf("config key %s: default: %v", f.key, err))
			}
			fs.String(f.flag, string(text), help)
			continue
		}
		switch v := f.val.Interface().(type) {
		case bool:
			fs.Bool(f.flag, v, help)
		case int:
			fs.Int(f.flag, v, help)
		case []string:
			fs.StringSlice(f.flag, v, help)
		case map[string]string, PodNetworkRanges:
			fs.StringArray(f.flag, nil, help)
		case Duration:
			fs.Duration(f.flag, v.Duration, help)
		default:
			panic(fmt.Sprintf("config key %s: no flag type for %T", f.key, v))
		}
	}
}

// ApplyFlags copies every flag the user set onto cfg, then validates.
func ApplyFlags(fs *pflag.FlagSet, cfg *Config) error {
	for _, f := range fields(cfg) {
		if !fs.Changed(f.flag) {
			continue
		}
		if err := applyFlag(fs, f); err != nil {
			return fmt.Errorf("--%s: %w", f.flag, err)
		}
	}
	return cfg.Validate()
}

func applyFlag(fs *pflag.FlagSet, f field) error {
	var (
		v   any
		err error
	)
	if t, ok := asText(f); ok {
		s, err := fs.GetString(f.flag)
		if err != nil {
			return err
		}
		return t.UnmarshalText([]byte(s))
	}
	switch f.val.Kind() {
	case reflect.String:
		s, err := fs.GetString(f.flag)
		if err == nil {
			f.val.SetString(s) // SetString: the field may be a named string type
		}
		return err
	case reflect.Bool:
		v, err = fs.GetBool(f.flag)
	case reflect.Int:
		v, err = fs.GetInt(f.flag)
	case reflect.Slice:
		v, err = fs.GetStringSlice(f.flag)
	case reflect.Map:
		if f.val.Type() == rangesType {
			v, err = podNetworkRanges(fs, f)
		} else {
			v, err = tunables(fs, f)
		}
	case reflect.Struct:
		if f.val.Type() != durationType {
			return fmt.Errorf("unsupported type %s", f.val.Type())
		}
		var d time.Duration
		d, err = fs.GetDuration(f.flag)
		v = Duration{d}
	}
	if err != nil {
		return err
	}
	f.val.Set(reflect.ValueOf(v))
	return nil
}

// tunables merges NAME=VALUE flags over the file's table.
func tunables(fs *pflag.FlagSet, f field) (map[string]string, error) {
	merged := maps.Clone(f.val.Interface().(map[string]string))
	if merged == nil {
		merged = map[string]string{}
	}
	return merged, eachPair(fs, f, func(name, value string) error {
		merged[name] = value
		return nil
	})
}

// podNetworkRanges merges NETDEV=RANGES flags over the file's table, each
// parsed as the file's are.
func podNetworkRanges(fs *pflag.FlagSet, f field) (PodNetworkRanges, error) {
	merged := maps.Clone(f.val.Interface().(PodNetworkRanges))
	if merged == nil {
		merged = PodNetworkRanges{}
	}
	return merged, eachPair(fs, f, func(netdev, value string) error {
		var blocks RangeBlocks
		if err := blocks.UnmarshalText([]byte(value)); err != nil {
			return fmt.Errorf("%s.%s: %w", f.key, netdev, err)
		}
		merged[netdev] = blocks
		return nil
	})
}

// eachPair calls set with each NAME=VALUE of f's repeated flag.
func eachPair(fs *pflag.FlagSet, f field, set func(name, value string) error) error {
	pairs, err := fs.GetStringArray(f.flag)
	if err != nil {
		return err
	}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q: want NAME=VALUE", p)
		}
		if err := set(name, value); err != nil {
			return err
		}
	}
	return nil
}
