"""specchat.core.engine"""
