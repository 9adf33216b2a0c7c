#!/usr/bin/env bash
# The local stack: a KRaft Kafka 4.x broker (one node, or a cluster of STACK_BROKERS) and an
# Apicurio Registry (Confluent compatible API), both fetched from Maven Central and bound to
# 127.0.0.1.
#
#   deploy/stack.sh fetch    resolve the jars into the cache (idempotent)
#   deploy/stack.sh java-home | apicurio-home   the Java 21+ home the registry runs on, and
#                            the registry's unpacked release (for deploy/image.sh stack)
#   deploy/stack.sh start    fetch, format storage if needed, start both, wait until ready
#   deploy/stack.sh stop     stop both by process id (SIGTERM, then SIGKILL after a grace period)
#   deploy/stack.sh status   say what runs, where
#   deploy/stack.sh env      print the export lines a client needs
#   deploy/stack.sh stop-registry | start-registry | restart-registry
#   deploy/stack.sh stop-kafka | start-kafka | restart-kafka [NODE]
#                            one server only (of a cluster: node NODE, default every node),
#                            data kept (for fault tests); start-registry needs Kafka up, since
#                            the registry keeps its schemas in a Kafka topic
#   deploy/stack.sh kill-kafka NODE   SIGKILL one broker (a crash, for fault tests)
#
# The registry keeps its schemas durably in the broker (Apicurio KafkaSQL storage: the journal
# topic REGISTRY_TOPIC), so schema ids survive a restart of the registry or of the stack.
# Servers start in a session of their own with only their log files open: the caller's
# terminal, pipes and locks are not inherited.
#
# Settings (environment):
#   STACK_CACHE       jar cache                      (default: <repo>/.stack/cache)
#   STACK_DATA_DIR    broker data, pids and logs     (default: <repo>/.stack/data)
#   KAFKA_PORT        PLAINTEXT listener             (default: 9092)
#   KAFKA_CONTROLLER_PORT  KRaft controller          (default: 9093)
#   KAFKA_SASL_PORT   SASL_PLAINTEXT (SCRAM) listener (default: 9094)
#   KAFKA_SSL_PORT    SASL_SSL (SCRAM over TLS) listener (default: 9095); its CA, broker and
#                     client certificates are generated once into STACK_DATA_DIR/tls
#   REGISTRY_PORT     schema registry HTTP            (default: 8081)
#   REGISTRY_MANAGEMENT_PORT  registry health/metrics (default: 8091)
#   STACK_ADMIN_PASSWORD  SCRAM password of User:admin (default: admin-secret)
#   STACK_START_TIMEOUT   seconds to wait for readiness (default: 120)
#   STACK_BROKERS     brokers in the cluster (default: 1). With more, each node is broker and
#                     controller (a KRaft quorum of them all); node N listens on each port
#                     above plus (N-1) * STACK_NODE_PORT_STEP (default: 10), keeps its data in
#                     kafka-N/ and logs to kafka-N.log (node 1: kafka/, kafka.log); topics get
#                     replication factor min(3, STACK_BROKERS) and min.insync.replicas 2 from
#                     three brokers up (internal ones too), and `env` says so for clients
#   REGISTRY_TOPIC    the registry's journal topic   (default: _registry-journal)
#   REGISTRY_SNAPSHOTS_TOPIC  its snapshots topic    (default: _registry-snapshots)
#
# Exit codes: 0 done; 1 a failure (its line says what); 2 an unknown command; 3 one of the six
# ports above (or a cluster node's) is taken by another process (checked before anything
# starts; the line names the port and its variable).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
CACHE=${STACK_CACHE:-$repo/.stack/cache}
DATA=${STACK_DATA_DIR:-$repo/.stack/data}
case "$DATA" in /*) ;; *) DATA=$PWD/$DATA ;; esac
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9093}
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-9094}
KAFKA_SSL_PORT=${KAFKA_SSL_PORT:-9095}
REGISTRY_PORT=${REGISTRY_PORT:-8081}
REGISTRY_MANAGEMENT_PORT=${REGISTRY_MANAGEMENT_PORT:-8091}
ADMIN_PASSWORD=${STACK_ADMIN_PASSWORD:-admin-secret}
TIMEOUT=${STACK_START_TIMEOUT:-120}
REGISTRY_TOPIC=${REGISTRY_TOPIC:-_registry-journal}
REGISTRY_SNAPSHOTS_TOPIC=${REGISTRY_SNAPSHOTS_TOPIC:-_registry-snapshots}
APICURIO_VERSION=3.3.3

# A data dir keeps the broker count it was formatted for: a later command without
# STACK_BROKERS acts on every node, and one with another count is refused (node 1 of a single
# broker is formatted standalone, a cluster's with every voter: they cannot be mixed).
FORMATTED_BROKERS=$(cat "$DATA/brokers" 2>/dev/null || true)
# (a data dir formatted before the count was kept is a single broker's)
if [ -z "$FORMATTED_BROKERS" ] && [ -f "$DATA/kafka/meta.properties" ]; then FORMATTED_BROKERS=1; fi
BROKERS=${STACK_BROKERS:-${FORMATTED_BROKERS:-1}}
NODE_PORT_STEP=${STACK_NODE_PORT_STEP:-10}
[[ "$BROKERS" =~ ^[1-9]$ ]] || { echo "[stack] error: STACK_BROKERS must be 1 to 9, not '$BROKERS'" >&2; exit 1; }
[[ "$NODE_PORT_STEP" =~ ^[1-9][0-9]*$ ]] || { echo "[stack] error: STACK_NODE_PORT_STEP must be a positive number, not '$NODE_PORT_STEP'" >&2; exit 1; }
if [ -n "$FORMATTED_BROKERS" ] && [ "$FORMATTED_BROKERS" != "$BROKERS" ]; then
  echo "[stack] error: $DATA was formatted for $FORMATTED_BROKERS broker(s), not $BROKERS: set STACK_BROKERS=$FORMATTED_BROKERS, or use another STACK_DATA_DIR" >&2
  exit 1
fi
REPLICATION=$(( BROKERS < 3 ? BROKERS : 3 ))
MIN_ISR=$(( BROKERS < 3 ? 1 : 2 ))

KAFKA_LIB=$CACHE/kafka-lib
APICURIO_DIR=$CACHE/apicurio-$APICURIO_VERSION

say() { printf '[stack] %s\n' "$*" >&2; }
die() { printf '[stack] error: %s\n' "$*" >&2; exit 1; }

# keep_logs FILE: FILE becomes FILE.1, FILE.1 FILE.2, ... up to FILE.5 (the oldest dropped).
keep_logs() {
  local file=$1 n
  for n in 4 3 2 1; do
    if [ -f "$file.$n" ]; then mv -f "$file.$n" "$file.$((n + 1))"; fi
  done
  if [ -f "$file" ]; then mv -f "$file" "$file.1"; fi
}

fetch() {
  command -v java >/dev/null || die "java not found: install a JDK 17 or newer"
  command -v mvn >/dev/null || die "mvn not found: install Apache Maven"
  mkdir -p "$CACHE"
  if [ ! -f "$KAFKA_LIB/.complete" ]; then
    say "fetching Kafka jars from Maven Central into $KAFKA_LIB"
    rm -rf "$KAFKA_LIB"
    mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$KAFKA_LIB" >"$CACHE/mvn-kafka.log" 2>&1 \
      || { tail -n 30 "$CACHE/mvn-kafka.log" >&2; die "maven could not resolve Kafka"; }
    touch "$KAFKA_LIB/.complete"
  fi
  if [ ! -f "$APICURIO_DIR/.complete" ]; then
    say "fetching Apicurio Registry $APICURIO_VERSION from Maven Central into $APICURIO_DIR"
    rm -rf "$APICURIO_DIR" "$CACHE/markers"
    # Maven's unpack skips archives it has a marker for; keep markers beside the cache so a
    # fresh cache always unpacks.
    (cd "$CACHE" && mvn -q -B dependency:unpack \
      -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
      -DmarkersDirectory="$CACHE/markers" \
      -DoutputDirectory="$APICURIO_DIR") >"$CACHE/mvn-apicurio.log" 2>&1 \
      || { tail -n 30 "$CACHE/mvn-apicurio.log" >&2; die "maven could not resolve Apicurio"; }
    [ -f "$APICURIO_DIR/quarkus-run.jar" ] || die "Apicurio archive has no quarkus-run.jar"
    touch "$APICURIO_DIR/.complete"
  fi
}

# Apicurio Registry 3.x is built for Java 21; Kafka runs on the default JDK (17 or newer).
registry_java() {
  local candidate
  for candidate in "${REGISTRY_JAVA_HOME:-}" "${JAVA_HOME:-}" /usr/lib/jvm/*; do
    [ -n "$candidate" ] && [ -x "$candidate/bin/java" ] || continue
    local major
    major=$("$candidate/bin/java" -XshowSettings:properties -version 2>&1 \
      | sed -n 's/^ *java.specification.version = \([0-9]*\).*/\1/p')
    if [ -n "$major" ] && [ "$major" -ge 21 ]; then echo "$candidate/bin/java"; return; fi
  done
  die "Apicurio Registry needs Java 21 or newer: none found in REGISTRY_JAVA_HOME, JAVA_HOME or /usr/lib/jvm"
}

# pid_alive pidfile: the pid file names a live server of this stack, that is a running process
# whose command line has the server's mark (so a reused pid is never taken for ours).
pid_alive() {
  [ -f "$1" ] || return 1
  local pid mark
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  case "$1" in
    */kafka.pid) mark="$DATA/server.properties" ;;
    */kafka-[0-9].pid) mark="$DATA/server-$(basename "$1" .pid | cut -d- -f2).properties" ;;
    */registry.pid) mark="-Dquarkus.http.port=$REGISTRY_PORT" ;;
    *) return 0 ;;
  esac
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$mark"
}

# spawn pidfile logfile command...: start a server detached from the caller. The child closes
# every inherited descriptor above 2, reads /dev/null and writes only to its log, in a session
# of its own (setsid; a background subshell of this script is no process-group leader, so
# setsid execs in place and the pid written is the server's).
spawn() {
  local pidfile=$1 log=$2; shift 2
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if [[ "$fd" =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@" </dev/null >>"$log" 2>&1
  ) &
  echo $! >"$pidfile"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port another process holds ends the script with one line naming it and its variable, and
# exit code 3 (before any download or java start: a busy SSL port used to fail 12 s in with
# a Java trace).
PORT_BUSY=3
require_free() {
  local var
  for var in "$@"; do
    if port_open "${!var}"; then
      printf '[stack] error: port %s (%s) is taken by another process: stop it, or set %s to a free port\n' \
        "${!var}" "$var" "$var" >&2
      exit "$PORT_BUSY"
    fi
  done
}
KAFKA_PORT_VARS=(KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_SASL_PORT KAFKA_SSL_PORT)
REGISTRY_PORT_VARS=(REGISTRY_PORT REGISTRY_MANAGEMENT_PORT)

# A node's files and ports: node 1 keeps the single broker's names (kafka.pid, kafka.log,
# server.properties, kafka/), node N>1 has kafka-N.pid, kafka-N.log, server-N.properties, kafka-N/.
node_file() { if [ "$1" = 1 ]; then echo "$DATA/kafka$2"; else echo "$DATA/kafka-$1$2"; fi; }
node_conf() { if [ "$1" = 1 ]; then echo "$DATA/server.properties"; else echo "$DATA/server-$1.properties"; fi; }
node_log4j() { if [ "$1" = 1 ]; then echo "$DATA/log4j2.properties"; else echo "$DATA/log4j2-$1.properties"; fi; }
node_port() { echo $(( $1 + ($2 - 1) * NODE_PORT_STEP )); }  # node_port BASE NODE
nodes() { seq 1 "$BROKERS"; }
valid_node() {
  [[ "$1" =~ ^[1-9]$ ]] && [ "$1" -le "$BROKERS" ] \
    || die "no node '$1': STACK_BROKERS is $BROKERS (nodes 1 to $BROKERS)"
}
bootstrap_list() {
  local n out=""
  for n in $(nodes); do out="$out${out:+,}127.0.0.1:$(node_port "$KAFKA_PORT" "$n")"; done
  echo "$out"
}
require_free_node() {  # every port of a node, by the variable it comes from
  local n=$1 var port of=""
  if [ "$BROKERS" -gt 1 ]; then of=" of node $n"; fi
  for var in "${KAFKA_PORT_VARS[@]}"; do
    port=$(node_port "${!var}" "$n")
    if port_open "$port"; then
      printf '[stack] error: port %s (%s%s) is taken by another process: stop it, or set %s to a free port\n' \
        "$port" "$var" "$of" "$var" >&2
      exit "$PORT_BUSY"
    fi
  done
}
# The ports of the parts not running yet (a running part holds its own ports).
check_ports() {
  local n
  for n in $(nodes); do pid_alive "$(node_file "$n" .pid)" || require_free_node "$n"; done
  pid_alive "$DATA/registry.pid" || require_free "${REGISTRY_PORT_VARS[@]}"
}

# make_tls: a CA, a broker certificate for 127.0.0.1/localhost in a PKCS12 keystore, and a
# client certificate (for mutual TLS), all signed by that CA, into $TLS. Idempotent: files that
# exist are kept, so clients keep trusting the same CA across restarts.
TLS=$DATA/tls
make_tls() {
  command -v openssl >/dev/null || die "openssl not found: the TLS listener needs it"
  mkdir -p "$TLS"; chmod 700 "$TLS"
  if [ ! -f "$TLS/ca.pem" ]; then
    say "generating the stack's CA in $TLS"
    rm -f "$TLS"/broker.* "$TLS"/client.*
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -keyout "$TLS/ca.key" \
      -out "$TLS/ca.pem" -subj "/CN=feedback-streams stack CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      >"$TLS/openssl.log" 2>&1 || { cat "$TLS/openssl.log" >&2; die "CA generation failed"; }
  fi
  [ -f "$TLS/store-password" ] || openssl rand -hex 16 >"$TLS/store-password"
  local name cn usage
  for name in broker client; do
    [ -f "$TLS/$name.p12" ] && continue
    if [ "$name" = broker ]; then cn=localhost; usage="subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth,clientAuth"
    else cn=admin; usage="extendedKeyUsage=clientAuth"; fi
    openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$TLS/$name.key" -out "$TLS/$name.csr" \
      -subj "/CN=$cn" >>"$TLS/openssl.log" 2>&1 \
      && printf '%s\n' "$usage" >"$TLS/$name.ext" \
      && openssl x509 -req -sha256 -days 825 -in "$TLS/$name.csr" -CA "$TLS/ca.pem" \
        -CAkey "$TLS/ca.key" -CAcreateserial -extfile "$TLS/$name.ext" -out "$TLS/$name.pem" \
        >>"$TLS/openssl.log" 2>&1 \
      && openssl pkcs12 -export -in "$TLS/$name.pem" -inkey "$TLS/$name.key" \
        -certfile "$TLS/ca.pem" -name "$name" -passout "file:$TLS/store-password" \
        -out "$TLS/$name.p12" >>"$TLS/openssl.log" 2>&1 \
      || { cat "$TLS/openssl.log" >&2; die "$name certificate generation failed"; }
    rm -f "$TLS/$name.csr" "$TLS/$name.ext"
  done
  # The broker's keystore must load in Java; keytool says so before the broker would.
  if command -v keytool >/dev/null; then
    keytool -list -storetype PKCS12 -keystore "$TLS/broker.p12" \
      -storepass "$(cat "$TLS/store-password")" >/dev/null 2>&1 \
      || die "keytool cannot read $TLS/broker.p12"
  fi
  chmod 600 "$TLS"/*.key "$TLS/store-password"
}

# The quorum: one node bootstraps itself (formatted --standalone); a cluster names every voter.
quorum_line() {
  if [ "$BROKERS" = 1 ]; then
    echo "controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT"
    return
  fi
  local n voters=""
  for n in $(nodes); do
    voters="$voters${voters:+,}$n@127.0.0.1:$(node_port "$KAFKA_CONTROLLER_PORT" "$n")"
  done
  echo "controller.quorum.voters=$voters"
}

write_kafka_config() {  # write_kafka_config NODE
  local n=$1 plain sasl ssl ctrl
  plain=$(node_port "$KAFKA_PORT" "$n"); sasl=$(node_port "$KAFKA_SASL_PORT" "$n")
  ssl=$(node_port "$KAFKA_SSL_PORT" "$n"); ctrl=$(node_port "$KAFKA_CONTROLLER_PORT" "$n")
  mkdir -p "$(node_file "$n" "")"
  make_tls
  cat >"$(node_conf "$n")" <<EOF
process.roles=broker,controller
node.id=$n
$(quorum_line)
listeners=PLAINTEXT://127.0.0.1:$plain,SASL_PLAINTEXT://127.0.0.1:$sasl,SASL_SSL://127.0.0.1:$ssl,CONTROLLER://127.0.0.1:$ctrl
advertised.listeners=PLAINTEXT://127.0.0.1:$plain,SASL_PLAINTEXT://127.0.0.1:$sasl,SASL_SSL://127.0.0.1:$ssl,CONTROLLER://127.0.0.1:$ctrl
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
log.dirs=$(node_file "$n" "")
num.partitions=3
default.replication.factor=$REPLICATION
min.insync.replicas=$MIN_ISR
offsets.topic.replication.factor=$REPLICATION
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=$REPLICATION
transaction.state.log.min.isr=$MIN_ISR
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=$REPLICATION
share.coordinator.state.topic.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
num.network.threads=2
num.io.threads=2
log.cleaner.dedupe.buffer.size=33554432
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS/broker.p12
ssl.keystore.password=$(cat "$TLS/store-password")
ssl.truststore.type=PEM
ssl.truststore.location=$TLS/ca.pem
ssl.client.auth=requested
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:admin
allow.everyone.if.no.acl.found=false
EOF
  cat >"$(node_log4j "$n")" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $(node_file "$n" .log)
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRefs = file
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
}

wait_ready() { # name pidfile logfile check...
  local name=$1 pidfile=$2 log=$3; shift 3
  local deadline=$((SECONDS + TIMEOUT))
  until "$@"; do
    if ! pid_alive "$pidfile"; then
      tail -n 40 "$log" >&2 || true
      # A caller that starts it again (start_registry) says so, and gets status 3.
      if [ "${EXIT_IS_RETRIED:-0}" = 1 ]; then return 3; fi
      die "$name exited during start-up (log: $log)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 40 "$log" >&2 || true
      # Not left half-started: a later start would take it for a running server.
      stop_one "$name" "$pidfile"
      die "$name not ready after ${TIMEOUT}s, stopped it again (log: $log)"
    fi
    sleep 0.5
  done
}

kafka_ready() {  # kafka_ready [NODE]: that node (default 1) has started and listens
  local n=${1:-1}
  grep -q "Kafka Server started" "$(node_file "$n" .log)" 2>/dev/null \
    && port_open "$(node_port "$KAFKA_PORT" "$n")"
}

# Ready once the KafkaSQL storage has bootstrapped (it reads the journal topic up to a marker
# it wrote itself at start-up, so every schema registered before is loaded: the storage
# readiness check of /health/ready) and the Confluent-compatible API answers.
registry_ready() {
  curl -fsS --max-time 5 "http://127.0.0.1:$REGISTRY_MANAGEMENT_PORT/health/ready" >/dev/null 2>&1 \
    && curl -fsS --max-time 5 "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7/subjects" >/dev/null 2>&1
}

# spawn_kafka NODE: format the node's storage on its first start, then start it (not waiting).
spawn_kafka() {
  local n=$1 dir conf log4j
  dir=$(node_file "$n" ""); conf=$(node_conf "$n"); log4j=$(node_log4j "$n")
  write_kafka_config "$n"
  if [ ! -f "$dir/meta.properties" ]; then
    # Every node of a cluster formats with the same cluster id, kept beside the data.
    if [ ! -s "$DATA/cluster-id" ]; then
      local made
      made=$(java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1) \
        && [ -n "$made" ] || die "could not make a cluster id (kafka.tools.StorageTool random-uuid)"
      echo "$made" >"$DATA/cluster-id"
      echo "$BROKERS" >"$DATA/brokers"
    fi
    local cluster_id standalone=()
    cluster_id=$(cat "$DATA/cluster-id")
    if [ "$BROKERS" = 1 ]; then standalone=(--standalone); fi
    say "formatting storage in $dir (cluster $cluster_id, node $n)"
    java -Dlog4j2.configurationFile="$log4j" -cp "$KAFKA_LIB/*" \
      kafka.tools.StorageTool format "${standalone[@]}" -t "$cluster_id" -c "$conf" \
      --add-scram "SCRAM-SHA-256=[name=admin,password=$ADMIN_PASSWORD]" \
      --add-scram "SCRAM-SHA-512=[name=admin,password=$ADMIN_PASSWORD]" \
      >"$(node_file "$n" .format.log)" 2>&1 \
      || { cat "$(node_file "$n" .format.log)" >&2; die "storage format of node $n failed"; }
  fi
  # A fresh log per start (the last five kept, kafka.log.1 the newest: a failure test that
  # restarts the broker several times keeps the start it failed in): readiness looks for this
  # start's "Kafka Server started".
  keep_logs "$(node_file "$n" .log)"
  : >"$(node_file "$n" .log)"
  : >"$(node_file "$n" .out)"
  local heap=(-Xms256m -Xmx768m)
  if [ "$BROKERS" -gt 1 ]; then heap=(-Xms128m -Xmx512m); fi  # several JVMs on one machine
  say "starting kafka node $n on 127.0.0.1:$(node_port "$KAFKA_PORT" "$n") (SASL/SCRAM on $(node_port "$KAFKA_SASL_PORT" "$n"), SASL/SCRAM over TLS on $(node_port "$KAFKA_SSL_PORT" "$n")), data in $dir"
  spawn "$(node_file "$n" .pid)" "$(node_file "$n" .out)" java "${heap[@]}" -XX:+UseG1GC \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$log4j" \
    -cp "$KAFKA_LIB/*" kafka.Kafka "$conf"
}

# start_kafka [NODE]: that node, or every node; the nodes of a cluster start together (a
# quorum forms only once most voters run), then each is waited for.
start_kafka() {
  local n started=()
  for n in ${1:-$(nodes)}; do
    valid_node "$n"
    if pid_alive "$(node_file "$n" .pid)"; then
      say "kafka node $n already running (pid $(cat "$(node_file "$n" .pid)"))"
      continue
    fi
    require_free_node "$n"
    spawn_kafka "$n"
    started+=("$n")
  done
  for n in "${started[@]}"; do
    wait_ready kafka "$(node_file "$n" .pid)" "$(node_file "$n" .log)" kafka_ready "$n"
    say "kafka node $n ready"
  done
}

# stop_kafka [NODE]: that node, or every node (the last first).
stop_kafka() {
  local n
  for n in ${1:-$(nodes | sort -rn)}; do
    valid_node "$n"
    stop_one "kafka node $n" "$(node_file "$n" .pid)"
  done
}

kill_kafka() {  # kill_kafka NODE: SIGKILL, no shutdown (the crash a fault test wants)
  local n=$1 pid pidfile
  valid_node "$n"
  pidfile=$(node_file "$n" .pid)
  pid_alive "$pidfile" || die "kafka node $n is not running"
  pid=$(cat "$pidfile")
  say "killing kafka node $n (pid $pid, SIGKILL)"
  kill -KILL "$pid"
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && die "kafka node $n (pid $pid) still runs 10 s after SIGKILL"
  rm -f "$pidfile"
}

spawn_registry() {
  local java_bin; java_bin=$(registry_java)
  # KafkaSQL storage: every change is a record on the journal topic (created by the registry,
  # infinite retention); on start the registry replays it into an in-memory database.
  # kafkasql log lines at INFO say when the journal is loaded ("KafkaSQL storage bootstrapped").
  spawn "$DATA/registry.pid" "$DATA/registry.log" "$java_bin" -Xms128m -Xmx384m \
    -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$REGISTRY_MANAGEMENT_PORT" \
    -Dquarkus.log.level=WARN -Dquarkus.log.category.\"io.apicurio.registry.storage.impl.kafkasql\".level=INFO \
    -Dapicurio.ccompat.legacy-id-mode.enabled=true \
    -Dapicurio.storage.kind=kafkasql \
    -Dapicurio.kafkasql.bootstrap.servers="$(bootstrap_list)" \
    -Dapicurio.kafkasql.topic="$REGISTRY_TOPIC" \
    -Dapicurio.kafkasql.snapshots.topic="$REGISTRY_SNAPSHOTS_TOPIC" \
    -Dapicurio.kafkasql.topic.auto-create=true \
    -jar "$APICURIO_DIR/quarkus-run.jar"
}

start_registry() {
  if pid_alive "$DATA/registry.pid"; then say "registry already running (pid $(cat "$DATA/registry.pid"))"; return; fi
  require_free "${REGISTRY_PORT_VARS[@]}"
  # The registry keeps its schemas in the broker: without Kafka it cannot load them.
  local n up=""
  for n in $(nodes); do kafka_ready "$n" && up=1 && break; done
  [ -n "$up" ] || die "kafka is not running on $(bootstrap_list): start it first (deploy/stack.sh start-kafka)"
  mkdir -p "$DATA"
  keep_logs "$DATA/registry.log"
  say "starting schema registry on 127.0.0.1:$REGISTRY_PORT (schemas in topic $REGISTRY_TOPIC)"
  # Apicurio 3.3 can die in its first seconds on a race inside its own Kafka consumer
  # (ConcurrentModificationException in endOffsets while it loads the snapshots topic, seen
  # on a loaded machine): a start that exits is tried again, twice.
  local attempt rc
  for attempt in 1 2 3; do
    spawn_registry
    rc=0
    EXIT_IS_RETRIED=$([ "$attempt" -lt 3 ] && echo 1 || echo 0) \
      wait_ready registry "$DATA/registry.pid" "$DATA/registry.log" registry_ready || rc=$?
    [ "$rc" = 0 ] && break
    say "registry exited during start-up (attempt $attempt of 3: $(grep -m1 'Caused by' \
      "$DATA/registry.log" 2>/dev/null || echo 'no cause logged')); starting it again"
    rm -f "$DATA/registry.pid"
    mv -f "$DATA/registry.log" "$DATA/registry.log.exited-$attempt"
  done
  say "registry ready (schemas loaded from topic $REGISTRY_TOPIC)"
}

stop_one() { # name pidfile
  local name=$1 pidfile=$2
  if ! pid_alive "$pidfile"; then rm -f "$pidfile"; return; fi
  local pid; pid=$(cat "$pidfile")
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name did not stop in 30s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && die "$name (pid $pid) still runs after SIGKILL"
  fi
  rm -f "$pidfile"
  say "$name stopped"
}

status() {
  local rc=0 n name
  for n in $(nodes); do
    if [ "$BROKERS" = 1 ]; then name="kafka    "; else name="kafka-$n  "; fi
    if pid_alive "$(node_file "$n" .pid)"; then
      echo "$name running  pid $(cat "$(node_file "$n" .pid)")  bootstrap 127.0.0.1:$(node_port "$KAFKA_PORT" "$n")  scram 127.0.0.1:$(node_port "$KAFKA_SASL_PORT" "$n")  scram+tls 127.0.0.1:$(node_port "$KAFKA_SSL_PORT" "$n") (CA $TLS/ca.pem)"
    else echo "$name stopped"; rc=1; fi
  done
  if pid_alive "$DATA/registry.pid"; then
    echo "registry  running  pid $(cat "$DATA/registry.pid")  url http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
  else echo "registry  stopped"; rc=1; fi
  echo "data      $DATA"
  return $rc
}

case "${1:-}" in
  fetch) fetch ;;
  java-home) registry_java | sed 's#/bin/java$##' ;;
  apicurio-home) echo "$APICURIO_DIR" ;;
  start) check_ports; fetch; start_kafka; start_registry; status ;;
  stop) stop_one registry "$DATA/registry.pid"; stop_kafka ;;
  status) status ;;
  env)
    echo "export KAFKA_BOOTSTRAP_SERVERS=$(bootstrap_list)"
    if [ "$BROKERS" -gt 1 ]; then
      echo "export STREAMS_REPLICATION_FACTOR=$REPLICATION STREAMS_MIN_INSYNC_REPLICAS=$MIN_ISR"
    fi
    echo "export SCHEMA_REGISTRY_URL=http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
    # The secured listeners, named for tests and operators; not KAFKA_SSL_CA_LOCATION itself,
    # which a PLAINTEXT client's settings refuse.
    echo "export KAFKA_SASL_PORT=$KAFKA_SASL_PORT"
    echo "export KAFKA_SSL_PORT=$KAFKA_SSL_PORT"
    echo "export STACK_CA_LOCATION=$TLS/ca.pem"
    echo "export STACK_CLIENT_CERTIFICATE=$TLS/client.pem STACK_CLIENT_KEY=$TLS/client.key"
    ;;
  start-kafka) fetch; start_kafka "${2:-}" ;;
  stop-kafka) stop_kafka "${2:-}" ;;
  restart-kafka) fetch; stop_kafka "${2:-}"; start_kafka "${2:-}" ;;
  kill-kafka) [ -n "${2:-}" ] || die "usage: deploy/stack.sh kill-kafka NODE"; kill_kafka "$2" ;;
  start-registry) fetch; start_registry ;;
  stop-registry) stop_one registry "$DATA/registry.pid" ;;
  restart-registry) fetch; stop_one registry "$DATA/registry.pid"; start_registry ;;
  *) awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "$0" >&2; exit 2 ;;
esac
