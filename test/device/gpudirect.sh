#!/bin/bash
# GPUDirect RDMA readiness on the GPU machine: the facts doctor's
# gpudirect checks read, raw, then `rdma-cdi doctor` itself against the
# machine's real driver and kernel. Run as root on the device machine, from
# the repository root, with a static rdma-cdi (CGO_ENABLED=0) at $1:
#
#   CGO_ENABLED=0 go build -o _out/gdr/rdma-cdi ./cmd/rdma-cdi     # here
#   bash test/device/gpudirect.sh _out/gdr/rdma-cdi                 # there (carry _out/gdr)
set -u
bin=${1:-_out/gdr/rdma-cdi}
export PATH=/usr/local/nvidia/bin:$PATH
section() { printf '\n## %s\n' "$*"; }

section "date, kernel, OS"
date -u +%Y-%m-%dT%H:%M:%SZ
uname -r
grep PRETTY_NAME /etc/os-release
section "cat /proc/driver/nvidia/version"
cat /proc/driver/nvidia/version 2>&1
section "lsmod (or /proc/modules)"
if command -v lsmod >/dev/null; then lsmod; else cut -d' ' -f1-3 /proc/modules; fi
section "nvidia-peermem: /sys/module/nvidia_peermem, /sys/kernel/mm/memory_peers"
ls -d /sys/module/nvidia_peermem /sys/kernel/mm/memory_peers 2>&1
ls /sys/kernel/mm/ 2>&1
section "kernel config"
cfg=/boot/config-$(uname -r)
if [ -r /proc/config.gz ]; then src="zcat /proc/config.gz"; elif [ -r "$cfg" ]; then src="cat $cfg"; else src=""; fi
echo "source: ${src:-none found}"
[ -n "$src" ] && $src | grep -E '^(# )?CONFIG_(DMA_SHARED_BUFFER|DMABUF_MOVE_NOTIFY|INFINIBAND|INFINIBAND_USER_MEM|INFINIBAND_ON_DEMAND_PAGING|MLX5_CORE|MLX5_INFINIBAND|IOMMU_SUPPORT|INTEL_IOMMU|AMD_IOMMU|PCI_P2PDMA)[= ]'
section "IOMMU: /sys/class/iommu, /sys/kernel/iommu_groups, /proc/cmdline"
ls /sys/class/iommu 2>&1
ls /sys/kernel/iommu_groups 2>&1 | head
cat /proc/cmdline
section "NVIDIA GPUs on PCI: sysfs path, link, IOMMU group"
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/vendor")" = 0x10de ] || continue
	case "$(cat "$d/class")" in 0x03*) ;; *) continue ;; esac
	echo "$(basename "$d") class $(cat "$d/class") -> $(readlink -f "$d")"
	echo "  link $(cat "$d/current_link_speed") x$(cat "$d/current_link_width") of $(cat "$d/max_link_speed") x$(cat "$d/max_link_width")"
	echo "  iommu_group: $(readlink "$d/iommu_group" 2>/dev/null || echo none)"
	for p in $(readlink -f "$d" | tr / '\n' | grep -E '^[0-9a-f]{4}:' | grep -v "$(basename "$d")"); do
		echo "  bridge $p config $(stat -c %s "/sys/bus/pci/devices/$p/config") bytes"
	done
done
section "RDMA devices: /sys/class/infiniband"
ls /sys/class/infiniband 2>&1
section "nvidia-smi"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1
section "rdma-cdi doctor (PATH without engines; exits 1 on any FAIL)"
"$bin" --config /nonexistent doctor --output /nonexistent/spec.yaml
echo "doctor_rc=$?"
section "rdma-cdi doctor --json, the gpudirect checks"
"$bin" --config /nonexistent doctor --output /nonexistent/spec.yaml --json | grep -A4 '"name": "gpudirect'
