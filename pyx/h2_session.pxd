# The parts of libnghttp2 (nghttp2/nghttp2.h, 1.52) the gRPC endpoint's server session uses.
from libc.stdint cimport int32_t, uint8_t, uint32_t


cdef extern from "nghttp2/nghttp2.h" nogil:
    ctypedef struct nghttp2_session:
        pass
    ctypedef struct nghttp2_session_callbacks:
        pass
    ctypedef struct nghttp2_option:
        pass

    ctypedef struct nghttp2_frame_hd:
        size_t length
        int32_t stream_id
        uint8_t type
        uint8_t flags

    ctypedef enum nghttp2_headers_category:
        NGHTTP2_HCAT_REQUEST
        NGHTTP2_HCAT_RESPONSE
        NGHTTP2_HCAT_PUSH_RESPONSE
        NGHTTP2_HCAT_HEADERS

    ctypedef struct nghttp2_headers:
        nghttp2_frame_hd hd
        nghttp2_headers_category cat

    ctypedef struct nghttp2_ping:
        nghttp2_frame_hd hd
        uint8_t opaque_data[8]

    ctypedef struct nghttp2_data:
        nghttp2_frame_hd hd
        size_t padlen

    ctypedef union nghttp2_frame:
        nghttp2_frame_hd hd
        nghttp2_headers headers
        nghttp2_ping ping
        nghttp2_data data

    ctypedef struct nghttp2_nv:
        uint8_t *name
        uint8_t *value
        size_t namelen
        size_t valuelen
        uint8_t flags

    ctypedef struct nghttp2_settings_entry:
        int32_t settings_id
        uint32_t value

    ctypedef union nghttp2_data_source:
        int fd
        void *ptr



cdef extern from "nghttp2/nghttp2.h":
    ctypedef ssize_t (*nghttp2_data_source_read_callback)(
        nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *data_flags,
        nghttp2_data_source *source, void *user_data) noexcept

    ctypedef int (*nghttp2_on_begin_headers_callback)(nghttp2_session *, const nghttp2_frame *, void *) noexcept
    ctypedef int (*nghttp2_on_header_callback)(nghttp2_session *, const nghttp2_frame *, const uint8_t *, size_t,
                                               const uint8_t *, size_t, uint8_t, void *) noexcept
    ctypedef int (*nghttp2_on_frame_recv_callback)(nghttp2_session *, const nghttp2_frame *, void *) noexcept
    ctypedef int (*nghttp2_on_data_chunk_recv_callback)(nghttp2_session *, uint8_t, int32_t, const uint8_t *,
                                                        size_t, void *) noexcept
    ctypedef int (*nghttp2_on_stream_close_callback)(nghttp2_session *, int32_t, uint32_t, void *) noexcept
    ctypedef ssize_t (*nghttp2_send_callback)(nghttp2_session *, const uint8_t *, size_t, int, void *) noexcept
    ctypedef int (*nghttp2_send_data_callback)(nghttp2_session *, nghttp2_frame *, const uint8_t *, size_t,
                                               nghttp2_data_source *, void *) noexcept



cdef extern from "nghttp2/nghttp2.h" nogil:
    ctypedef struct nghttp2_data_provider:
        nghttp2_data_source source
        nghttp2_data_source_read_callback read_callback

    enum:
        NGHTTP2_HEADERS
        NGHTTP2_DATA
        NGHTTP2_PING
        NGHTTP2_FLAG_ACK
        NGHTTP2_FLAG_NONE
        NGHTTP2_FLAG_END_STREAM
        NGHTTP2_NV_FLAG_NONE
        NGHTTP2_NV_FLAG_NO_COPY_NAME
        NGHTTP2_NV_FLAG_NO_COPY_VALUE
        NGHTTP2_DATA_FLAG_NONE
        NGHTTP2_DATA_FLAG_EOF
        NGHTTP2_DATA_FLAG_NO_END_STREAM
        NGHTTP2_DATA_FLAG_NO_COPY
        NGHTTP2_ERR_DEFERRED
        NGHTTP2_ERR_CALLBACK_FAILURE
        NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE
        NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS
        NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE
        NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE
        NGHTTP2_NO_ERROR
        NGHTTP2_INTERNAL_ERROR
        NGHTTP2_CANCEL
        NGHTTP2_REFUSED_STREAM

    int nghttp2_session_callbacks_new(nghttp2_session_callbacks **callbacks_ptr)
    void nghttp2_session_callbacks_del(nghttp2_session_callbacks *callbacks)
    void nghttp2_session_callbacks_set_on_begin_headers_callback(nghttp2_session_callbacks *, nghttp2_on_begin_headers_callback)
    void nghttp2_session_callbacks_set_on_header_callback(nghttp2_session_callbacks *, nghttp2_on_header_callback)
    void nghttp2_session_callbacks_set_on_frame_recv_callback(nghttp2_session_callbacks *, nghttp2_on_frame_recv_callback)
    void nghttp2_session_callbacks_set_on_data_chunk_recv_callback(nghttp2_session_callbacks *,
                                                                   nghttp2_on_data_chunk_recv_callback)
    void nghttp2_session_callbacks_set_on_stream_close_callback(nghttp2_session_callbacks *,
                                                                nghttp2_on_stream_close_callback)

    void nghttp2_session_callbacks_set_send_callback(nghttp2_session_callbacks *, nghttp2_send_callback)
    void nghttp2_session_callbacks_set_send_data_callback(nghttp2_session_callbacks *, nghttp2_send_data_callback)

    int nghttp2_option_new(nghttp2_option **option_ptr)
    void nghttp2_option_del(nghttp2_option *option)
    void nghttp2_option_set_max_settings(nghttp2_option *option, size_t val)

    int nghttp2_session_server_new2(nghttp2_session **session_ptr, const nghttp2_session_callbacks *callbacks,
                                    void *user_data, const nghttp2_option *option)
    void nghttp2_session_del(nghttp2_session *session)
    ssize_t nghttp2_session_mem_recv(nghttp2_session *session, const uint8_t *data, size_t inlen)
    ssize_t nghttp2_session_mem_send(nghttp2_session *session, const uint8_t **data_ptr)
    int nghttp2_session_send(nghttp2_session *session)
    int nghttp2_session_want_read(nghttp2_session *session)
    int nghttp2_session_want_write(nghttp2_session *session)
    int nghttp2_session_resume_data(nghttp2_session *session, int32_t stream_id)
    int32_t nghttp2_session_get_last_proc_stream_id(nghttp2_session *session)
    int nghttp2_session_set_local_window_size(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                                              int32_t window_size)
    void *nghttp2_session_get_stream_user_data(nghttp2_session *session, int32_t stream_id)
    int nghttp2_session_set_stream_user_data(nghttp2_session *session, int32_t stream_id, void *stream_user_data)

    int nghttp2_submit_settings(nghttp2_session *session, uint8_t flags, const nghttp2_settings_entry *iv,
                                size_t niv)
    int nghttp2_submit_response(nghttp2_session *session, int32_t stream_id, const nghttp2_nv *nva, size_t nvlen,
                                const nghttp2_data_provider *data_prd)
    int nghttp2_submit_trailer(nghttp2_session *session, int32_t stream_id, const nghttp2_nv *nva, size_t nvlen)
    int nghttp2_submit_ping(nghttp2_session *session, uint8_t flags, const uint8_t *opaque_data)
    int nghttp2_submit_rst_stream(nghttp2_session *session, uint8_t flags, int32_t stream_id, uint32_t error_code)
    int nghttp2_submit_goaway(nghttp2_session *session, uint8_t flags, int32_t last_stream_id, uint32_t error_code,
                              const uint8_t *opaque_data, size_t opaque_data_len)
    const char *nghttp2_strerror(int lib_error_code)
