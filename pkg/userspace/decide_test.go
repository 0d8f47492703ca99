package userspace

import (
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func ownStack() ImageStack {
	return ImageStack{
		Libibverbs: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1", FoundBy: "the image's /etc/ld.so.cache", PABI: 34,
		ProviderDir:   "/usr/lib/x86_64-linux-gnu/libibverbs",
		Providers:     map[string]int{"mlx5": 34, "efa": 34},
		DriverConfigs: map[string]bool{"mlx5": true, "efa": true},
	}
}

func TestDecide(t *testing.T) {
	node := Choice{model.UserSpaceAuto, "node config cdi.user_space"}
	noProviders := ownStack()
	noProviders.Providers, noProviders.DriverConfigs = nil, nil
	otherABI := ownStack()
	otherABI.Providers["mlx5"] = 33
	noDriverFile := ownStack()
	delete(noDriverFile.DriverConfigs, "mlx5")
	onlyEFA := ownStack()
	delete(onlyEFA.Providers, "mlx5")

	cases := []struct {
		name          string
		choice        Choice
		image         ImageStack
		hostSet       bool
		lend, replace bool
		problems      []string // substrings, one per problem, in order
	}{
		{"own stack runs untouched", node, ownStack(), true, false, false, nil},
		{"no stack gets the host's", node, ImageStack{}, true, true, false, nil},
		{"no stack, nothing to lend", node, ImageStack{}, false, false, false, []string{"no usable RDMA user space to lend"}},
		{"own stack without providers", node, noProviders, true, false, false, []string{"has no providers in /usr/lib/x86_64-linux-gnu/libibverbs"}},
		{"own stack without the node's provider", node, onlyEFA, true, false, false, []string{"no mlx5 provider for this node's HCAs (no libmlx5-rdmav*.so in /usr/lib/x86_64-linux-gnu/libibverbs; it has efa)"}},
		{"provider of another ABI", node, otherABI, true, false, false, []string{"mlx5 provider has ABI rdmav33 but its libibverbs (/usr/lib/x86_64-linux-gnu/libibverbs.so.1) expects rdmav34"}},
		{"provider not registered", node, noDriverFile, true, false, false, []string{"no /etc/libibverbs.d/mlx5.driver"}},
		{"mode host over an own stack", Choice{model.UserSpaceHost, "container env RDMA_CDI_USER_SPACE"}, ownStack(), true, true, true, nil},
		{"mode host, no stack", Choice{model.UserSpaceHost, "x"}, ImageStack{}, true, true, false, nil},
		{"mode host, nothing to lend", Choice{model.UserSpaceHost, "x"}, ownStack(), false, false, false, []string{"no usable RDMA user space to lend"}},
		{"mode image, no stack", Choice{model.UserSpaceImage, "x"}, ImageStack{}, true, false, false, []string{"the image has no libibverbs.so.1"}},
		{"mode image, own stack", Choice{model.UserSpaceImage, "x"}, ownStack(), true, false, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.choice, tc.image, []string{"mlx5"}, tc.hostSet)
			if d.Lend != tc.lend || d.Replace != tc.replace {
				t.Errorf("lend %v replace %v, want %v %v (%s)", d.Lend, d.Replace, tc.lend, tc.replace, d.Reason)
			}
			if d.Reason == "" || d.Mode != tc.choice.Mode {
				t.Errorf("decision %+v: want a reason and mode %s", d, tc.choice.Mode)
			}
			if len(d.Problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d like %q", d.Problems, len(tc.problems), tc.problems)
			}
			for i, want := range tc.problems {
				if !strings.Contains(d.Problems[i], want) {
					t.Errorf("problem %q does not say %q", d.Problems[i], want)
				}
			}
		})
	}
}

// With the node's drivers unknown, no provider is named missing; an image
// without any provider is still told.
func TestDecideUnknownNodeProviders(t *testing.T) {
	d := Decide(Choice{model.UserSpaceAuto, "x"}, ownStack(), nil, true)
	if d.Lend || len(d.Problems) != 0 {
		t.Errorf("%+v: want the image's stack and no problem", d)
	}
}

func TestChoose(t *testing.T) {
	ann := map[string]string{apis.AnnotationUserSpace: "image"}
	cases := []struct {
		name   string
		ann    map[string]string
		env    []string
		want   model.UserSpaceMode
		source string
		err    string
	}{
		{"node default", nil, []string{"PATH=/bin"}, model.UserSpaceHost, "node config", ""},
		{"annotation", ann, nil, model.UserSpaceImage, "annotation " + apis.AnnotationUserSpace, ""},
		{"annotation beats env", ann, []string{apis.EnvUserSpace + "=host"}, model.UserSpaceImage, "annotation", ""},
		{"env", nil, []string{apis.EnvUserSpace + "=Host"}, model.UserSpaceHost, "container env", ""},
		{"last env assignment wins", nil, []string{apis.EnvUserSpace + "=image", apis.EnvUserSpace + "=auto"}, model.UserSpaceAuto, "container env", ""},
		{"bad env", nil, []string{apis.EnvUserSpace + "=hots"}, "", "", "container env RDMA_CDI_USER_SPACE: RDMA user-space mode \"hots\": want auto, host or image"},
		{"bad annotation", map[string]string{apis.AnnotationUserSpace: ""}, nil, "", "", "annotation " + apis.AnnotationUserSpace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Choose(model.UserSpaceHost, tc.ann, tc.env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || c.Mode != tc.want || !strings.HasPrefix(c.Source, tc.source) {
				t.Errorf("Choose = %+v, %v; want %s from %s", c, err, tc.want, tc.source)
			}
		})
	}
	if c, _ := Choose("", nil, nil); c.Mode != model.UserSpaceAuto {
		t.Errorf("no default: %s, want auto", c.Mode)
	}
}
