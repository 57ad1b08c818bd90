.PHONY: build console run test bench chaos partition deps fmt vet clean

GO ?= go
BIN := bin

build: console
	$(GO) build -o $(BIN)/ ./ingest-api ./mapper-worker ./writer-worker
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

console:
	deploy/dev/console.sh

deps:
	deploy/dev/deps.sh

run: deps build
	deploy/dev/run.sh

test:
	deploy/dev/test.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN) .run console/node_modules ingest-api/internal/console/dist/assets ingest-api/internal/console/dist/*.html ingest-api/internal/console/dist/*.json

bench: deps build
	deploy/dev/bench.sh
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./ingest-api/... ./mapper-worker/... ./writer-worker/... | tee bench/out/components.txt
	cd sdk/go && $(GO) test -run '^$$' -bench . -benchmem -benchtime 5x -count 5 . | tee ../../bench/out/sdk.txt

chaos:
	@mkdir -p .run
	bash -o pipefail -c 'CHAOS_FULL=1 GOTEST_FLAGS="-run Chaos|Hostile|DiskFull|StorageLimit -v" deploy/dev/test.sh 2>&1 | tee .run/chaos.log | grep --line-buffered -E "^(chaos fault|hostile attack|--- |ok|FAIL)|^ +[a-z_]+_test\.go:[0-9]+: " | grep --line-buffered -v -E "stack_test\.go:196: |_test\.go:[0-9]+: (chaos fault|hostile attack)="' || { echo "make chaos failed: the whole output is in .run/chaos.log"; exit 1; }

partition:
	@mkdir -p .run
	bash -o pipefail -c 'PARTITION=1 CHAOS_FULL=1 GOTEST_TIMEOUT=80m GOTEST_FLAGS="-run Partition -v" deploy/dev/test.sh 2>&1 | tee .run/partition.log | grep --line-buffered -E "^(chaos fault|partition fault|registry fault|--- |ok|FAIL)|^ +[a-z_]+_test\.go:[0-9]+: " | grep --line-buffered -v -E "stack_test\.go:196: |_test\.go:[0-9]+: chaos fault="' || { echo "make partition failed: the whole output is in .run/partition.log"; exit 1; }
