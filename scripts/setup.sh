#!/usr/bin/env bash
# Install what kafkactl needs on a Debian machine: system packages (as root, only those missing)
# and a virtualenv in .venv with kafkactl and the given extras. Safe to run again.
#   usage: scripts/setup.sh [extra...]     e.g. scripts/setup.sh test spark   (or test,spark)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="$(IFS=,; echo "$*")"   # every extra given, comma-separated as pip wants them
case ",$extras," in *,test,*) testing=1 ;; *) testing=0 ;; esac

need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v gcc >/dev/null || need+=(gcc python3-dev)   # crcmod's C extension
# a real ZooKeeper server (`kafkactl zookeeper start`, integration tests) and the Java it runs on
test -f /usr/share/java/zookeeper.jar || need+=(zookeeper)   # no service is started by it
command -v java >/dev/null || need+=(default-jre-headless)
command -v kcat >/dev/null || need+=(kcat)   # the load generator of `bench broker`, a client in the quick start and tests
if [ "$testing" = 1 ]; then
  command -v openssl >/dev/null || need+=(openssl)   # the certificates of the TLS tests and `bench tls`   # the completion scripts are tested in each shell they serve
  command -v zsh >/dev/null || need+=(zsh)
  command -v fish >/dev/null || need+=(fish)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  mkdir -p /usr/share/man/man1   # slim images lack it, and the JRE's postinst fails without it
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
spec="."
[ -n "$extras" ] && spec=".[$extras]"
# pip's output goes to a log, shown only when the install fails
if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e "$spec"; } \
    >.venv/pip.log 2>&1; then
  cat .venv/pip.log >&2
  echo "setup: pip install failed (log above)" >&2
  exit 1
fi
.venv/bin/python -c 'import broker, kafkactl' # fail loudly if the install did not take
