package watch

import (
	"testing"
)

func TestParseUevent(t *testing.T) {
	msg := []byte("add@/devices/pci0000:00/0000:00:01.0/0000:17:00.0/infiniband_verbs/uverbs1\x00" +
		"ACTION=add\x00DEVPATH=/devices/pci0000:00/0000:00:01.0/0000:17:00.0/infiniband_verbs/uverbs1\x00" +
		"SUBSYSTEM=infiniband_verbs\x00MAJOR=231\x00MINOR=193\x00DEVNAME=infiniband/uverbs1\x00SEQNUM=4242\x00")
	ev, ok := ParseUevent(msg)
	if !ok {
		t.Fatal("kernel uevent not parsed")
	}
	if ev.Action != "add" || ev.Subsystem != "infiniband_verbs" || ev.Vars["MINOR"] != "193" || ev.Name() != "infiniband/uverbs1" {
		t.Fatalf("parsed %+v", ev)
	}
	if !ev.Relevant(DefaultUeventSubsystems) {
		t.Fatal("infiniband_verbs uevent not relevant")
	}

	ib, ok := ParseUevent([]byte("remove@/devices/pci0000:00/0000:17:00.0/infiniband/mlx5_1\x00ACTION=remove\x00SUBSYSTEM=infiniband\x00NAME=mlx5_1\x00"))
	if !ok || ib.Action != "remove" || ib.Name() != "mlx5_1" || !ib.Relevant(DefaultUeventSubsystems) {
		t.Fatalf("infiniband uevent: %+v ok=%v", ib, ok)
	}
	net, ok := ParseUevent([]byte("change@/devices/virtual/net/veth0\x00ACTION=change\x00SUBSYSTEM=net\x00"))
	if !ok || net.Relevant(DefaultUeventSubsystems) {
		t.Fatalf("net uevent relevant=%v ok=%v", net.Relevant(DefaultUeventSubsystems), ok)
	}
	for _, bad := range []string{"", "libudev\x00\xfe\xed\xca\xfe", "add\x00SUBSYSTEM=infiniband\x00", "add@relative\x00X=1\x00"} {
		if _, ok := ParseUevent([]byte(bad)); ok {
			t.Errorf("ParseUevent(%q) accepted", bad)
		}
	}
}
