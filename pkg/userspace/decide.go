package userspace

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Decision is what a container gets, with the reasons an operator reads in
// the hook log and in doctor.
type Decision struct {
	Choice
	// Lend is true when the host's set is mounted into the container.
	Lend bool
	// Replace is true when lent files go over the image's own (model.UserSpaceHost on
	// an image with a stack); otherwise an image file is never covered.
	Replace bool
	// Reason says why, in one sentence.
	Reason string
	// Problems are what will not work in the container, each with what to
	// do about it; they never change the decision.
	Problems []string
}

// Decide picks the stack for one container. image is what Probe found;
// needProviders are the providers the node's HCAs use (empty when
// unknown); hostSet says whether the node has a matched set to lend.
func Decide(choice Choice, image ImageStack, needProviders []string, hostSet bool) Decision {
	d := Decision{Choice: choice}
	switch {
	case choice.Mode == model.UserSpaceImage:
		d.Reason = fmt.Sprintf("mode image (%s): the image's own RDMA user space only", choice.Source)
		if !image.Carries() {
			d.Problems = append(d.Problems, fmt.Sprintf("the image has no libibverbs.so.1 its linker finds: RDMA programs will not load (install rdma-core's libibverbs1 and ibverbs-providers in the image, or set %s=auto)", apis.EnvUserSpace))
		}
	case choice.Mode == model.UserSpaceHost:
		d.Lend, d.Replace = hostSet, hostSet && image.Carries()
		d.Reason = fmt.Sprintf("mode host (%s): the host's RDMA user space", choice.Source)
		if d.Replace {
			d.Reason += fmt.Sprintf(", mounted over the image's own (%s)", image.Libibverbs)
		}
	case image.Carries():
		d.Reason = fmt.Sprintf("the image carries libibverbs.so.1 at %s (found by %s): its own RDMA user space runs untouched", image.Libibverbs, image.FoundBy)
	default:
		d.Lend = hostSet
		d.Reason = "the image has no libibverbs.so.1 its linker finds: the host's matched set is lent"
	}
	wantsHost := choice.Mode == model.UserSpaceHost || choice.Mode == model.UserSpaceAuto && !image.Carries()
	if wantsHost && !hostSet {
		d.Problems = append(d.Problems, "the node has no usable RDMA user space to lend (see rdma-cdi doctor): RDMA programs will not load")
	}
	if !d.Lend && image.Carries() {
		d.Problems = append(d.Problems, providerProblems(image, needProviders)...)
	}
	return d
}

// providerProblems are the node's providers the image's libibverbs cannot
// load: absent, of another private ABI, or not registered. Each says what
// to install, never that host files will be added: patching a foreign
// build with the host's provider is exactly the mix this package prevents.
func providerProblems(image ImageStack, need []string) []string {
	var out []string
	if len(image.Providers) == 0 {
		out = append(out, fmt.Sprintf("the image's libibverbs (%s) has no providers in %s: it sees no HCA (install the image's ibverbs-providers, or the rdma-core/MOFED package that matches its libibverbs)", image.Libibverbs, image.ProviderDir))
		return out
	}
	for _, p := range slices.Sorted(slices.Values(need)) {
		pabi, ok := image.Providers[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("the image has no %s provider for this node's HCAs (no lib%s-rdmav*.so in %s; it has %s): install the image's ibverbs-providers", p, p, image.ProviderDir, strings.Join(slices.Sorted(maps.Keys(image.Providers)), ", ")))
		case image.PABI != 0 && pabi != image.PABI:
			out = append(out, fmt.Sprintf("the image's %s provider has ABI rdmav%d but its libibverbs (%s) expects rdmav%d: libibverbs will not load it (install both from one rdma-core/MOFED build)", p, pabi, image.Libibverbs, image.PABI))
		case !image.DriverConfigs[p]:
			out = append(out, fmt.Sprintf("the image has no /etc/libibverbs.d/%s.driver: its libibverbs will not load the %s provider (install the image's ibverbs-providers)", p, p))
		}
	}
	return out
}
