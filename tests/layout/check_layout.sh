#!/usr/bin/env bash
# Checks that the folders mean what docs/library.md's Layout says: include
# arrows run one way, and core never names a plug-in. Prints each violation
# as file:line: rule, and exits 1 if there is any.
#   core/                   includes no plug-in folder; its root holds no
#                           source but precompiled.h
#   core/<layer>/           includes no core/ layer above its own, in the
#                           order base, config, serialization, communication,
#                           data, model, optim, sharding, engine, parallel,
#                           checkpoint, train, nor forward-declares a type
#                           one of those defines; a folder of core/ that is
#                           no layer is reported
#   core/parallel/ (its root: the contract a mode implements)
#                           includes no mode's folder; modes.cpp, where the
#                           modes register, aside
#   core/parallel/<mode>/   includes no other mode's folder but ddp/ (every
#                           mode keeps data-parallel replicas) and the one
#                           it builds on (hsdp/ on zero3/); a folder of
#                           core/parallel/ that is no mode is reported
#   core/'s other layers     include no mode's folder (the trainer and
#                           checkpoints see a mode through the contracts)
#   algorithms/, callbacks/, schedulers/
#                           include core/'s layers up to checkpoint/ but
#                           parallel/, and their own folder (its subfolders
#                           included: algorithms/sam/) only: never a
#                           parallel mode's, nor core/train/
#   tokenizer/, models/, datasets/, launch/ (the library parts on top)
#                           include core/ and their own folder only,
#                           datasets/ the tokenizer/ too (text data is
#                           tokenized as it is read);
#                           models/ and datasets/ never core/train/ (they
#                           implement core/model/'s and core/data/'s contracts)
#   core/ and the plug-ins  include no library part
#   programs/               is included by nothing (tests, bench and fuzz
#                           included): its files are mains
#   every library file      includes basin's files by their basin/ path (never
#                           a relative one) and never the umbrella basin.h,
#                           which is for programs and users
#   core/ (every folder)    names no class or struct that a plug-in folder defines
#   every library file      is at most 400 lines (core/, the plug-ins, the
#                           library parts, programs/): a longer one holds
#                           more than one concern
set -uo pipefail
root=${1:?usage: check_layout.sh SOURCE_ROOT}
cd "$root" || exit 2
plugins=(algorithms callbacks schedulers)
plugin_pattern=$(IFS='|'; echo "${plugins[*]}")

inc='#[[:space:]]*include[[:space:]]*'  # also "# include" and tabs
sources() { find "$@" -type f \( -name '*.h' -o -name '*.cpp' \) 2>/dev/null | sort; }
# grep -n output ("file:line:text") becomes "file:line: rule".
as_violation() { sed -E "s|^([^:]+:[0-9]+):.*$|\1: $1|"; }

mapfile -t core_files < <(sources core)
layers=(base config serialization communication data model optim sharding engine parallel checkpoint train)

violations=$(
  grep -nE "${inc}[<\"]basin/($plugin_pattern)/" "${core_files[@]}" /dev/null | as_violation "core includes a plug-in"
  find core -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' \) ! -name precompiled.h | sort |
    sed -E 's|$|:1: core/'"'"'s root holds no source but precompiled.h: put it in its layer|'
  layer_pattern=$(IFS='|'; echo "${layers[*]}")
  find core -mindepth 1 -maxdepth 1 -type d | sort | grep -vxE "core/($layer_pattern)" |
    sed -E 's|$|/: no layer of core/ ('"${layers[*]}"'): add it to the layers or move its files into one|'
  for ((i = 0; i < ${#layers[@]}; i++)); do
    above=("${layers[@]:i+1}")
    [ ${#above[@]} -gt 0 ] || continue
    mapfile -t files < <(sources "core/${layers[i]}")
    [ ${#files[@]} -gt 0 ] || continue
    above_pattern=$(IFS='|'; echo "${above[*]}")
    grep -nE "${inc}[<\"]basin/core/($above_pattern)/" "${files[@]}" /dev/null |
      as_violation "core/${layers[i]}/ includes no layer above it (${above[*]})"
    # Nor names one through a forward declaration, which includes nothing but points up all the same.
    above_types=$(sources "${above[@]/#/core/}" |
      xargs -r grep -hoE '^\s*(class|struct)\s+(\[\[[^]]*\]\]\s*)?[A-Z][A-Za-z0-9_]*\s*(final\s*)?([:{]|$)' |
      sed -E 's/^\s*(class|struct)\s+(\[\[[^]]*\]\]\s*)?([A-Za-z0-9_]+).*/\3/' | sort -u | paste -sd'|')
    [ -n "$above_types" ] && grep -nE "\b(class|struct)\s+($above_types)\s*;" "${files[@]}" /dev/null |
      as_violation "core/${layers[i]}/ declares no type a layer above it defines (${above[*]})"
  done

  parallel=core/parallel
  modes=(ddp zero zero3 hsdp)
  declare -A builds_on=([hsdp]=zero3)  # a mode that is another within groups of ranks
  mode_pattern=$(IFS='|'; echo "${modes[*]}")
  find $parallel -mindepth 1 -maxdepth 1 -type d | sort | grep -vxE "$parallel/($mode_pattern)" |
    sed -E 's|$|/: no mode of core/parallel/ ('"${modes[*]}"'): add it to the modes|'
  mapfile -t contracts < <(find $parallel -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' \) ! -name modes.cpp | sort)
  [ ${#contracts[@]} -gt 0 ] && grep -nE "${inc}[<\"]basin/$parallel/($mode_pattern)/" "${contracts[@]}" /dev/null |
    as_violation "core/parallel/'s root includes no mode's folder (modes.cpp aside)"
  mapfile -t outside_parallel < <(sources core | grep -v "^$parallel/")
  grep -nE "${inc}[<\"]basin/$parallel/($mode_pattern)/" "${outside_parallel[@]}" /dev/null |
    as_violation "core/'s layers outside core/parallel/ include no mode's folder: they ask the contracts"
  for mode in "${modes[@]}"; do
    mapfile -t files < <(sources $parallel/$mode)
    [ ${#files[@]} -gt 0 ] || continue
    base=${builds_on[$mode]:-}
    grep -nE "${inc}[<\"]basin/$parallel/($mode_pattern)/" "${files[@]}" /dev/null |
      grep -vE "${inc}[<\"]basin/$parallel/($mode|ddp${base:+|$base})/" |
      as_violation "core/parallel/$mode/ includes no other mode's folder but ddp/${base:+ and $base/, which it builds on}"
  done

  for plugin in "${plugins[@]}"; do
    mapfile -t files < <(sources "$plugin")
    [ ${#files[@]} -gt 0 ] || continue
    grep -nE "${inc}[<\"]basin/" "${files[@]}" /dev/null |
      grep -vE "${inc}[<\"]basin/(core/(base|config|serialization|communication|data|model|optim|sharding|engine|checkpoint)|$plugin(/[a-z0-9_]+)?)/[a-z0-9_]+\.h[>\"]" |
      as_violation "$plugin/ includes only core/'s layers up to checkpoint/ but parallel/, and $plugin/"
  done

  parts=(tokenizer models datasets launch)
  part_pattern=$(IFS='|'; echo "${parts[*]}")
  for part in "${parts[@]}"; do
    mapfile -t files < <(sources "$part")
    [ ${#files[@]} -gt 0 ] || continue
    allowed=$part rule="$part/ includes core/ and $part/ only"
    [ "$part" = datasets ] && allowed="datasets|tokenizer" rule="datasets/ includes core/, tokenizer/ and datasets/ only"
    grep -nE "${inc}[<\"]basin/" "${files[@]}" /dev/null |
      grep -vE "${inc}[<\"]basin/(core|$allowed)/" |
      as_violation "$rule"
  done
  mapfile -t contract_parts < <(sources models datasets)
  grep -nE "${inc}[<\"]basin/core/train/" "${contract_parts[@]}" /dev/null |
    as_violation "models/ and datasets/ include no core/train/: they implement core/model/'s and core/data/'s contracts"
  mapfile -t below_parts < <(sources core "${plugins[@]}")
  grep -nE "${inc}[<\"]basin/($part_pattern)/" "${below_parts[@]}" /dev/null |
    as_violation "core/ and the plug-ins include no library part (${parts[*]})"
  mapfile -t includers < <(sources core "${plugins[@]}" "${parts[@]}" programs tests bench fuzz)
  grep -nE "${inc}[<\"]basin/programs/" "${includers[@]}" /dev/null |
    as_violation "nothing includes programs/: its files are mains"
  mapfile -t library_files < <(sources core "${plugins[@]}" "${parts[@]}" programs)
  grep -nE "${inc}\"" "${library_files[@]}" /dev/null | grep -vE "${inc}\"basin/" |
    as_violation "basin's files are included by their basin/ path, never a relative one"
  grep -nE "${inc}[<\"]basin/basin\.h[>\"]" "${library_files[@]}" /dev/null |
    as_violation "the library includes what it uses, never the umbrella basin.h (for programs and users)"

  for file in "${library_files[@]}"; do
    lines=$(wc -l < "$file")
    [ "$lines" -le 400 ] || echo "$file:1: $lines lines, over 400: split it by concern"
  done

  # The types the plug-ins define (definitions, not forward declarations).
  mapfile -t plugin_types < <(sources "${plugins[@]}" |
    xargs -r grep -hoE '^\s*(class|struct)\s+(\[\[[^]]*\]\]\s*)?[A-Z][A-Za-z0-9_]*\s*(final\s*)?([:{]|$)' |
    sed -E 's/^\s*(class|struct)\s+(\[\[[^]]*\]\]\s*)?([A-Za-z0-9_]+).*/\3/' | sort -u)
  if [ ${#plugin_types[@]} -gt 0 ]; then
    type_pattern="\\b($(IFS='|'; echo "${plugin_types[*]}"))\\b"
    # Comments and messages may mention a plug-in (SAM is why GroupSync exists); code may not.
    for file in "${core_files[@]}"; do
      sed -E 's|//.*$||; s/"([^"\\]|\\.)*"/""/g' "$file" | grep -noE "$type_pattern" |
        sed -E "s|^([0-9]+):(.*)$|$file:\\1: core names the plug-in type \\2|"
    done
  fi
)

if [ -n "$violations" ]; then
  echo "$violations"
  exit 1
fi
echo "layout: ${#core_files[@]} core files and the plug-ins keep the rules"
