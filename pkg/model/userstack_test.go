package model

import "testing"

func TestUserStackRehomed(t *testing.T) {
	s := UserStack{Files: []HostFile{
		{Path: "/usr/lib/libibverbs.so.1", HostPath: "/host/usr/lib/libibverbs.so.1", Symlink: "libibverbs.so.1.14"},
		{Path: "/etc/libibverbs.d/mlx5.driver", HostPath: "/host/etc/libibverbs.d/mlx5.driver"},
	}}
	got := s.Rehomed("/")
	for i, want := range []string{"/usr/lib/libibverbs.so.1", "/etc/libibverbs.d/mlx5.driver"} {
		if got.Files[i].HostPath != want || got.Files[i].Path != s.Files[i].Path || got.Files[i].Symlink != s.Files[i].Symlink {
			t.Errorf("file %d: %+v, want HostPath %s", i, got.Files[i], want)
		}
	}
	if s.Files[0].HostPath != "/host/usr/lib/libibverbs.so.1" {
		t.Errorf("Rehomed changed its receiver: %+v", s.Files[0])
	}
	if got := s.Rehomed("/mnt/node").Files[1].HostPath; got != "/mnt/node/etc/libibverbs.d/mlx5.driver" {
		t.Errorf("under /mnt/node: %s", got)
	}
}
