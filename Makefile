# Cortado — common tasks. `make help` lists them.
SWIFT ?= swift
PY := .venv/bin/python
CORTADO_DEBUG := .build/debug/cortado
EXAMPLE := examples/iris

.PHONY: help setup build release serve test unit-test conformance bench example protos image clean fuzz sanitize soak

help:
	@echo "make serve        set up, build (release) and run cortado serve on examples/repository"
	@echo "make example      set up, build and run cortado predict on the bundled example model"
	@echo "make test         set up, build, run the Swift unit tests and the conformance suite"
	@echo "make bench        release build, then the benchmarks (vs XGBoost, scikit-learn, MLServer, nghttpd)"
	@echo "make image        build the OCI image from Debian packages (mmdebstrap + umoci, as root) and smoke-test it"
	@echo "make protos       regenerate Protos/CoreML from coremltools' descriptors and Sources/CortadoSpec"
	@echo "make setup        install the Debian and Python packages the build and tests need"
	@echo "make fuzz         libFuzzer + ASan build, then each fuzz target for SECONDS (default 30) from fuzz/corpus"
	@echo "make sanitize     the threaded Swift tests under AddressSanitizer and ThreadSanitizer (long: two rebuilds)"
	@echo "make soak         release build, then a SECONDS-long (default 120) soak: 64 callers, reloads, SIGTERM"

setup:
	@scripts/setup.sh

build: setup
	$(SWIFT) build

release: setup
	$(SWIFT) build -c release

serve: setup
	$(SWIFT) build -c release --product cortado
	.build/release/cortado serve --models examples/repository

example: build
	$(CORTADO_DEBUG) inspect $(EXAMPLE)/model.mlmodel
	$(CORTADO_DEBUG) predict $(EXAMPLE)/model.mlmodel --input $(EXAMPLE)/rows.jsonl

unit-test: build
	$(SWIFT) test

conformance: build
	CORTADO_BIN=$(CORTADO_DEBUG) $(PY) -m pytest -q Tests/Conformance Tests/Format Tests/CLI Tests/NeuralNetwork Tests/Server Tests/Load Tests/Linked Tests/NMS Tests/Plugins Tests/Compile Tests/MLProgram Tests/Deploy Tests/Update

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

# Long runs, by hand (not in `make test`): README "Fuzzing, sanitizers and soak".
fuzz: setup
	scripts/fuzz.sh $(or $(SECONDS),30)

sanitize: setup
	scripts/sanitize.sh

soak: setup
	$(SWIFT) build -c release --product cortado
	CORTADO_BIN=.build/release/cortado $(PY) scripts/soak.py --seconds $(or $(SECONDS),120)

clean:
	rm -rf .build .cases
