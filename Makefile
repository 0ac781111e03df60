# Cortado — common tasks. `make help` lists them.
SWIFT ?= swift
PY := .venv/bin/python
CORTADO_DEBUG := .build/debug/cortado
EXAMPLE := examples/iris
# Speed flags, here rather than in Package.swift (SwiftPM refuses a versioned dependency whose
# products carry unsafeFlags): C kernels at -O3 in debug builds too (CI tests the kernels as
# shipped), no exclusivity checks, F16C conversions on x86_64, -Ounchecked in release. Every
# `swift build`/`swift test` here passes the same flags so that neither rebuilds the other's work.
SWIFT_FLAGS := -Xcc -O3 -Xswiftc -enforce-exclusivity=unchecked $(if $(filter x86_64,$(shell uname -m)),-Xcc -mf16c)
SWIFT_RELEASE_FLAGS := $(SWIFT_FLAGS) -Xswiftc -Ounchecked

.PHONY: help swift-flags setup build release serve client test unit-test conformance bench example protos image clean fuzz sanitize soak

help:
	@echo "make serve        install the build's Debian packages, build (release) and run cortado serve on examples/repository"
	@echo "make client       examples/client.py against a running make serve (a venv with only tritonclient)"
	@echo "make example      set up, build and run cortado predict on the bundled example model"
	@echo "make test         set up, build, run the Swift unit tests and the conformance suite"
	@echo "make bench        release build, then the benchmarks (vs XGBoost, scikit-learn, MLServer, nghttpd)"
	@echo "make image        build the OCI image from Debian packages (mmdebstrap + umoci, as root) and smoke-test it"
	@echo "make protos       regenerate Protos/CoreML from coremltools' descriptors and Sources/CortadoSpec"
	@echo "make setup        install the Debian and Python packages the build and tests need"
	@echo "make fuzz         libFuzzer + ASan build, then each fuzz target for SECONDS (default 30) from fuzz/corpus"
	@echo "make sanitize     the threaded Swift tests under AddressSanitizer and ThreadSanitizer (long: two rebuilds)"
	@echo "make soak         release build, then a SECONDS-long (default 120) soak: 64 callers, reloads, SIGTERM"

# `swift build $$(make -s swift-flags)` builds by hand as `make build` does.
swift-flags:
	@echo $(SWIFT_FLAGS)

setup:
	@scripts/setup.sh

build: setup
	$(SWIFT) build $(SWIFT_FLAGS)

release: setup
	$(SWIFT) build -c release $(SWIFT_RELEASE_FLAGS)

# No Python test environment: serving needs only the Debian packages and the toolchain.
serve:
	@scripts/setup.sh --build
	$(SWIFT) build -c release $(SWIFT_RELEASE_FLAGS) --product cortado
	.build/release/cortado serve --models examples/repository

client:
	@scripts/setup.sh --client
	.venv-client/bin/python examples/client.py

example: build
	$(CORTADO_DEBUG) inspect $(EXAMPLE)/model.mlmodel
	$(CORTADO_DEBUG) predict $(EXAMPLE)/model.mlmodel --input $(EXAMPLE)/rows.jsonl

unit-test: build
	$(SWIFT) test $(SWIFT_FLAGS)

conformance: build
	CORTADO_BIN=$(CORTADO_DEBUG) $(PY) -m pytest -q Tests/Conformance Tests/Format Tests/CLI Tests/NeuralNetwork Tests/Server Tests/Load Tests/Linked Tests/NMS Tests/Plugins Tests/Compile Tests/MLProgram Tests/Deploy Tests/Update Tests/Adopt Tests/Docs

test: unit-test conformance

bench: release
	@scripts/setup-bench.sh
	$(PY) bench/run_all.py --bin .build/release

# Not part of `make test`: it downloads a Debian base (mmdebstrap), builds a release binary and
# runs the image for a few minutes; needs root. deploy/container/build-image.sh says what it does.
image: setup
	deploy/container/build-image.sh

protos: setup
	PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python $(PY) scripts/write_protos.py Protos/CoreML
	scripts/generate_swift.sh
	scripts/generate_server_swift.sh

# Long runs, by hand (not in `make test`): docs/development.md, "Fuzzing, sanitizers and soak".
fuzz: setup
	scripts/fuzz.sh $(or $(SECONDS),30)

sanitize: setup
	scripts/sanitize.sh

soak: setup
	$(SWIFT) build -c release $(SWIFT_RELEASE_FLAGS) --product cortado
	CORTADO_BIN=.build/release/cortado $(PY) scripts/soak.py --seconds $(or $(SECONDS),120)

clean:
	rm -rf .build .cases
