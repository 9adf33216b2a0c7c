#!/usr/bin/env bash
# The local stack: a single-node KRaft Kafka 4.x broker and an Apicurio Registry (Confluent
# compatible API), both fetched from Maven Central and bound to 127.0.0.1.
#
#   deploy/stack.sh fetch    resolve the jars into the cache (idempotent)
#   deploy/stack.sh java-home  the Java 21+ home the registry runs on (deploy/image.sh stack)
#   deploy/stack.sh start    fetch, format storage if needed, start both, wait until ready
#   deploy/stack.sh stop     stop both by process id (SIGTERM, then SIGKILL after a grace period)
#   deploy/stack.sh status   say what runs, where
#   deploy/stack.sh env      print the export lines a client needs
#   deploy/stack.sh stop-registry | start-registry | restart-registry
#   deploy/stack.sh stop-kafka | start-kafka | restart-kafka
#                            one server only, data kept (for fault tests); start-registry needs
#                            Kafka up, since the registry keeps its schemas in a Kafka topic
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
#   REGISTRY_TOPIC    the registry's journal topic   (default: _registry-journal)
#   REGISTRY_SNAPSHOTS_TOPIC  its snapshots topic    (default: _registry-snapshots)
#
# Exit codes: 0 done; 1 a failure (its line says what); 2 an unknown command; 3 one of the six
# ports above is taken by another process (checked before anything starts; the line names the
# port and its variable).
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
# The ports of the parts not running yet (a running part holds its own ports).
check_ports() {
  pid_alive "$DATA/kafka.pid" || require_free "${KAFKA_PORT_VARS[@]}"
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

write_kafka_config() {
  mkdir -p "$DATA/kafka"
  make_tls
  cat >"$DATA/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SASL_SSL://127.0.0.1:$KAFKA_SSL_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SASL_SSL://127.0.0.1:$KAFKA_SSL_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
log.dirs=$DATA/kafka
num.partitions=3
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
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
  cat >"$DATA/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $DATA/kafka.log
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

kafka_ready() { grep -q "Kafka Server started" "$DATA/kafka.log" 2>/dev/null && port_open "$KAFKA_PORT"; }

# Ready once the KafkaSQL storage has bootstrapped (it reads the journal topic up to a marker
# it wrote itself at start-up, so every schema registered before is loaded: the storage
# readiness check of /health/ready) and the Confluent-compatible API answers.
registry_ready() {
  curl -fsS --max-time 5 "http://127.0.0.1:$REGISTRY_MANAGEMENT_PORT/health/ready" >/dev/null 2>&1 \
    && curl -fsS --max-time 5 "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7/subjects" >/dev/null 2>&1
}

start_kafka() {
  if pid_alive "$DATA/kafka.pid"; then say "kafka already running (pid $(cat "$DATA/kafka.pid"))"; return; fi
  require_free "${KAFKA_PORT_VARS[@]}"
  write_kafka_config
  if [ ! -f "$DATA/kafka/meta.properties" ]; then
    local cluster_id
    cluster_id=$(java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    say "formatting storage in $DATA/kafka (cluster $cluster_id)"
    java -Dlog4j2.configurationFile="$DATA/log4j2.properties" -cp "$KAFKA_LIB/*" \
      kafka.tools.StorageTool format --standalone -t "$cluster_id" -c "$DATA/server.properties" \
      --add-scram "SCRAM-SHA-256=[name=admin,password=$ADMIN_PASSWORD]" \
      --add-scram "SCRAM-SHA-512=[name=admin,password=$ADMIN_PASSWORD]" \
      >"$DATA/format.log" 2>&1 || { cat "$DATA/format.log" >&2; die "storage format failed"; }
  fi
  # A fresh log per start (the last five kept, kafka.log.1 the newest: a failure test that
  # restarts the broker several times keeps the start it failed in): readiness looks for this
  # start's "Kafka Server started".
  keep_logs "$DATA/kafka.log"
  : >"$DATA/kafka.log"
  : >"$DATA/kafka.out"
  say "starting kafka on 127.0.0.1:$KAFKA_PORT (SASL/SCRAM on $KAFKA_SASL_PORT, SASL/SCRAM over TLS on $KAFKA_SSL_PORT), data in $DATA/kafka"
  spawn "$DATA/kafka.pid" "$DATA/kafka.out" java -Xms256m -Xmx768m -XX:+UseG1GC \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$DATA/log4j2.properties" \
    -cp "$KAFKA_LIB/*" kafka.Kafka "$DATA/server.properties"
  wait_ready kafka "$DATA/kafka.pid" "$DATA/kafka.log" kafka_ready
  say "kafka ready"
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
    -Dapicurio.kafkasql.bootstrap.servers="127.0.0.1:$KAFKA_PORT" \
    -Dapicurio.kafkasql.topic="$REGISTRY_TOPIC" \
    -Dapicurio.kafkasql.snapshots.topic="$REGISTRY_SNAPSHOTS_TOPIC" \
    -Dapicurio.kafkasql.topic.auto-create=true \
    -jar "$APICURIO_DIR/quarkus-run.jar"
}

start_registry() {
  if pid_alive "$DATA/registry.pid"; then say "registry already running (pid $(cat "$DATA/registry.pid"))"; return; fi
  require_free "${REGISTRY_PORT_VARS[@]}"
  # The registry keeps its schemas in the broker: without Kafka it cannot load them.
  kafka_ready || die "kafka is not running on 127.0.0.1:$KAFKA_PORT: start it first (deploy/stack.sh start-kafka)"
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
  local rc=0
  if pid_alive "$DATA/kafka.pid"; then
    echo "kafka     running  pid $(cat "$DATA/kafka.pid")  bootstrap 127.0.0.1:$KAFKA_PORT  scram 127.0.0.1:$KAFKA_SASL_PORT  scram+tls 127.0.0.1:$KAFKA_SSL_PORT (CA $TLS/ca.pem)"
  else echo "kafka     stopped"; rc=1; fi
  if pid_alive "$DATA/registry.pid"; then
    echo "registry  running  pid $(cat "$DATA/registry.pid")  url http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
  else echo "registry  stopped"; rc=1; fi
  echo "data      $DATA"
  return $rc
}

case "${1:-}" in
  fetch) fetch ;;
  java-home) registry_java | sed 's#/bin/java$##' ;;
  start) check_ports; fetch; start_kafka; start_registry; status ;;
  stop) stop_one registry "$DATA/registry.pid"; stop_one kafka "$DATA/kafka.pid" ;;
  status) status ;;
  env)
    echo "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$KAFKA_PORT"
    echo "export SCHEMA_REGISTRY_URL=http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
    # The secured listeners, named for tests and operators; not KAFKA_SSL_CA_LOCATION itself,
    # which a PLAINTEXT client's settings refuse.
    echo "export KAFKA_SASL_PORT=$KAFKA_SASL_PORT"
    echo "export KAFKA_SSL_PORT=$KAFKA_SSL_PORT"
    echo "export STACK_CA_LOCATION=$TLS/ca.pem"
    echo "export STACK_CLIENT_CERTIFICATE=$TLS/client.pem STACK_CLIENT_KEY=$TLS/client.key"
    ;;
  start-kafka) fetch; start_kafka ;;
  stop-kafka) stop_one kafka "$DATA/kafka.pid" ;;
  restart-kafka) fetch; stop_one kafka "$DATA/kafka.pid"; start_kafka ;;
  start-registry) fetch; start_registry ;;
  stop-registry) stop_one registry "$DATA/registry.pid" ;;
  restart-registry) fetch; stop_one registry "$DATA/registry.pid"; start_registry ;;
  *) sed -n '2,39p' "$0" >&2; exit 2 ;;
esac
