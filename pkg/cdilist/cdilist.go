// Package cdilist reads CDI spec dirs as container engines read them,
// through the CDI library's cache: the devices they see, and the errors
// that hide a spec's devices from them (`rdma-cdi cdi list`).
package cdilist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// Listing is what the CDI cache made of some spec dirs.
type Listing struct {
	Devices []Device
	// SpecErrors are per spec file, sorted by path.
	SpecErrors []SpecError
	// DirErrors are spec dirs that could not be read (a missing one is
	// not an error), sorted.
	DirErrors []string
}

// Device is one fully qualified CDI device name and the spec defining it.
type Device struct {
	Name, Version, Path string
}

// SpecError is a spec file the CDI library rejected.
type SpecError struct {
	Path string
	// Vendor is the kind's vendor, as far as it can be read; "" if unknown.
	Vendor string
	Errs   []error
}

// Read lists dirs, lowest priority first.
func Read(dirs []string) (Listing, error) {
	var l Listing
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if cache == nil {
		return l, fmt.Errorf("reading CDI spec dirs %s: %w", strings.Join(dirs, ", "), err)
	}
	for _, name := range cache.ListDevices() {
		d := Device{Name: name}
		if dev := cache.GetDevice(name); dev != nil && dev.GetSpec() != nil {
			d.Version = dev.GetSpec().Version
			d.Path = dev.GetSpec().GetPath()
		}
		l.Devices = append(l.Devices, d)
	}
	for path, errs := range cache.GetErrors() {
		l.SpecErrors = append(l.SpecErrors, SpecError{Path: path, Vendor: specVendor(path), Errs: errs})
	}
	slices.SortFunc(l.SpecErrors, func(a, b SpecError) int { return strings.Compare(a.Path, b.Path) })
	for dir, err := range cache.GetSpecDirErrors() {
		if !errors.Is(err, os.ErrNotExist) {
			l.DirErrors = append(l.DirErrors, fmt.Sprintf("spec dir %s: %v", dir, err))
		}
	}
	slices.Sort(l.DirErrors)
	return l, nil
}

// specVendor reads the vendor of a spec file the CDI library rejected: the
// part of its kind before "/", read leniently (JSON is YAML); failing that,
// the "<vendor>-<class>.<ext>" file name generate writes. "" when neither
// says.
func specVendor(path string) string {
	if data, err := os.ReadFile(path); err == nil {
		var head struct {
			Kind string `yaml:"kind"`
		}
		if yaml.Unmarshal(data, &head) == nil && head.Kind != "" {
			vendor, _, _ := strings.Cut(head.Kind, "/")
			return vendor
		}
	}
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if i := strings.LastIndex(base, "-"); i > 0 {
		return base[:i]
	}
	return ""
}

// Broken returns the paths of vendor's specs that have errors: their
// devices are visible to no engine.
func (l Listing) Broken(vendor string) []string {
	var paths []string
	for _, se := range l.SpecErrors {
		if vendor != "" && se.Vendor == vendor {
			paths = append(paths, se.Path)
		}
	}
	return paths
}

// Count is the number of vendor's devices the engines see.
func (l Listing) Count(vendor string) int {
	n := 0
	for _, d := range l.Devices {
		if strings.HasPrefix(d.Name, vendor+"/") {
			n++
		}
	}
	return n
}
