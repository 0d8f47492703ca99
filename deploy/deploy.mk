# Packaging and installation, included at the end of the Makefile.
#
#   make deb          _out/rdma-cdi_<version>_amd64.deb (nfpm, as a library:
#                     deploy/packaging/mkpkg, its own Go module)
#   make rpm          _out/rdma-cdi-<version>-1.x86_64.rpm, the same contents
#                     with RHEL's paths
#   make install      deploy/bootstrap/install.sh: PREFIX/bin/rdma-cdi, the
#                     rdma-container-runtime symlink, config, units, podman hook,
#                     then rdma-cdi generate (INSTALL_FLAGS="--root DIR --dry-run ...")
#   make uninstall    the reverse (the config is kept; INSTALL_FLAGS=--purge removes it)

PREFIX        ?= /usr/local
INSTALL_FLAGS ?=
PKG_ARCH      ?= amd64

.PHONY: deb rpm install uninstall

deb rpm: build
	cd deploy/packaging/mkpkg && CGO_ENABLED=0 $(GO) run . -format $@ \
		-binary $(abspath $(BINDIR)/rdma-cdi) -deploy $(abspath deploy) \
		-version '$(VERSION)' -arch $(PKG_ARCH) -out $(abspath $(OUT))

install: build
	deploy/bootstrap/install.sh --binary bin/rdma-cdi --prefix $(PREFIX) $(INSTALL_FLAGS)

uninstall:
	deploy/bootstrap/install.sh --uninstall --prefix $(PREFIX) $(INSTALL_FLAGS)
