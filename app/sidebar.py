"""The sidebar shared by every page: the environment (preset, or custom alpha/beta/gamma).

Every page calls :func:`environment_picker` first. Streamlit forgets a widget's value when a page
without it runs, so the values are also kept under shadow keys and restored on the next page.
(The picker lives in the pages rather than in ``main.py`` because Streamlit's AppTest drops
sidebar widgets of the navigation entry point on reruns.)
"""

from __future__ import annotations

import streamlit as st

import costmodels as cm

_KEEP = "_keep_"


def _kept(key: str) -> str:
    """Restore a widget's value saved by another page, and return its key."""
    if key not in st.session_state and _KEEP + key in st.session_state:
        st.session_state[key] = st.session_state[_KEEP + key]
    return key


def _keep_all() -> None:
    for key in list(st.session_state):
        if isinstance(key, str) and key.startswith("env_"):
            st.session_state[_KEEP + key] = st.session_state[key]


def environment_picker() -> cm.Environment:
    """Render the environment controls in the sidebar and return (and remember) the choice."""
    env = _render()
    _keep_all()
    return env


def _render() -> cm.Environment:
    st.sidebar.header("Environment")
    mode = st.sidebar.radio("source", ["preset", "custom"], horizontal=True, key=_kept("env_mode"))
    if mode == "preset":
        names = cm.environments()
        name = st.sidebar.selectbox("preset", names, index=names.index("10GbE"), key=_kept("env_preset"))
        env = cm.environment(name)
        st.sidebar.caption(env.description)
        with st.sidebar.expander("numbers and their source"):
            st.write(env.summary())
            st.caption(env.source)
    else:
        alpha_us = st.sidebar.slider("alpha: latency (us)", 0.1, 200.0, 20.0, step=0.1, key=_kept("env_alpha"))
        bw = st.sidebar.slider("bandwidth (GB/s)", 0.05, 500.0, 1.177, step=0.01, key=_kept("env_bw"))
        gamma = st.sidebar.number_input("gamma (s per byte reduced)", 0.0, 1e-6, 0.0, format="%.3e",
                                        key=_kept("env_gamma"))
        gpus = st.sidebar.number_input("GPUs per node", 1, 64, 1, key=_kept("env_gpus"))
        kwargs = {"alpha": alpha_us * 1e-6, "beta": 1 / (bw * 1e9), "gamma": gamma, "name": "custom"}
        if gpus > 1:
            ia = st.sidebar.slider("intra-node alpha (us)", 0.1, 50.0, 1.0, step=0.1, key=_kept("env_ialpha"))
            ibw = st.sidebar.slider("intra-node bandwidth (GB/s)", 1.0, 1000.0, 240.0, key=_kept("env_ibw"))
            nics = st.sidebar.number_input("NICs per node", 1, int(gpus), 1, key=_kept("env_nics"))
            kwargs.update(intra_alpha=ia * 1e-6, intra_beta=1 / (ibw * 1e9), gpus_per_node=int(gpus),
                          nics_per_node=int(nics))
        env = cm.Environment(**kwargs)
        st.sidebar.caption(env.summary())
    return env

