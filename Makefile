.PHONY: setup test run
setup:
	bash scripts/setup.sh
test:
	bash scripts/test.sh
run:
	bash scripts/run-default.sh
